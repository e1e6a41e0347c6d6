// The JSON bodies of OpenAI replies (whole completions, stream chunks, the model list) and SSE framing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lanes/stream.h"
#include "server/api_request.h"
#include "server/engine.h"
#include "server/served_model.h"

namespace ls::server {

// What every body of one reply repeats.
struct ReplyHeader {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::ChatCompletions;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // generated tokens, eos included
};

// A new reply's header: a fresh id for `endpoint`, the time now.
ReplyHeader make_reply_header(Endpoint endpoint, const std::string& model);

// "chat.completion" / "text_completion" with one choice.
std::string completion_body(const ReplyHeader& header, std::string_view text, FinishReason finish, Usage usage);
// One stream chunk: the role (chat's first chunk), a piece of text, or the finish reason (FinishReason::None: null).
// `with_usage` adds "usage": null, as OpenAI does when stream_options.include_usage is set.
std::string chunk_body(const ReplyHeader& header, bool with_role, std::string_view text, FinishReason finish,
                       bool with_usage);
// The last chunk when stream_options.include_usage is set: no choices, the usage.
std::string usage_chunk_body(const ReplyHeader& header, Usage usage);
// GET /v1/models, and GET /v1/models/{id}.
std::string model_body(const ServedModel& model);
std::string models_body(const ServedModel& model);

// GET /health: {"status": "ok", "open_requests", "rounds", "tokens_generated", "drafts_verified", "drafts_accepted"}.
std::string health_body(const EngineCounters& counters);

// One server-sent event carrying `data`: "data: <data>\n\n".
std::string sse_event(std::string_view data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace ls::server
