// OpenAI request bodies (/v1/chat/completions, /v1/completions) read and validated into plain data, and the error
// replies in OpenAI's shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/sampling.h"

namespace ls::server {

enum class Endpoint { ChatCompletions, Completions };

// A refusal as the client sees it: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
};

inline constexpr int kMaxStopStrings = 16;

// One validated request; what the prompt becomes (template, tokens) is decided later, with the model's tokenizer.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;
  nlohmann::ordered_json messages;               // chat: [{role, content, ...}], at least one
  std::string prompt_text;                       // completions: the prompt as text ...
  std::optional<std::vector<int32_t>> prompt_ids;  // ... or as token ids
  std::optional<int64_t> max_tokens;             // max_completion_tokens, else max_tokens; absent = to the context end
  Sampling sampling;                             // sampling.seed only when has_seed
  bool has_seed = false;
  std::vector<std::string> stop;                 // never empty strings
  bool stream = false;
  bool include_usage = false;                    // stream_options.include_usage
  bool draft = true;                             // extension: false keeps this request away from the drafter
  int max_draft = -1;                            // extension: most drafts per round, -1 = the engine's limit
  nlohmann::ordered_json template_extra = nlohmann::ordered_json::object();  // chat_template_kwargs
};

// Reads `body` for `endpoint`; the first refusal (malformed JSON, a wrong type, a value out of range, n > 1, a
// field this server does not support such as logprobs or tools) comes back as an ApiError naming the field.
std::optional<ApiError> parse_completion_request(std::string_view body, Endpoint endpoint, CompletionRequest& out);

// {"error": {...}} for `error`.
std::string error_body(const ApiError& error);

}  // namespace ls::server
