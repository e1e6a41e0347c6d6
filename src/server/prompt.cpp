// Prompt building: the model's chat template (as `lanespark generate --chat`), tokenizing, and the context limit.
#include "server/prompt.h"

#include <algorithm>

#include "server/reply_text.h"

namespace ls::server {
namespace {

std::optional<ApiError> prompt_ids(const CompletionRequest& request, const ServedModel& model,
                                   std::vector<int32_t>& ids) {
  const text::Tokenizer& tokenizer = *model.tokenizer;
  if (request.prompt_ids) {
    for (int32_t id : *request.prompt_ids)
      if (!tokenizer.has_id(id))
        return ApiError{400, "prompt token id " + std::to_string(id) + " is not in the vocabulary",
                        "invalid_request_error", "prompt", ""};
    ids = *request.prompt_ids;
    return std::nullopt;
  }
  std::string text = request.prompt_text;
  const bool chat = request.endpoint == Endpoint::ChatCompletions;
  if (chat) {
    if (!model.chat_template)
      return ApiError{400, "this model has no usable chat template (" + model.chat_template_error +
                               "); use /v1/completions", "invalid_request_error", "messages", ""};
    text::ChatRequest chat_request;
    chat_request.messages = request.messages;
    chat_request.extra = request.template_extra;
    Result<std::string> rendered = model.chat_template->render(chat_request);
    if (!rendered.ok())
      return ApiError{400, "the chat template refused the messages: " + rendered.status().to_string(),
                      "invalid_request_error", "messages", ""};
    text = std::move(rendered).value();
  }
  // The chat template writes its own BOS; a plain prompt gets the tokenizer's special tokens, as generate does.
  Result<std::vector<int32_t>> encoded = tokenizer.encode(text, /*add_special_tokens=*/!chat);
  if (!encoded.ok())
    return ApiError{400, "cannot tokenize the prompt: " + encoded.status().to_string(), "invalid_request_error",
                    chat ? "messages" : "prompt", ""};
  ids = std::move(encoded).value();
  if (ids.empty())
    return ApiError{400, "the prompt is empty (no tokens)", "invalid_request_error", chat ? "messages" : "prompt", ""};
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> make_lanes_request(const CompletionRequest& request, const ServedModel& model, Request& out) {
  if (std::optional<ApiError> error = prompt_ids(request, model, out.prompt)) return error;
  const int64_t prompt_tokens = static_cast<int64_t>(out.prompt.size());
  const char* param = request.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  if (prompt_tokens >= model.context_length)
    return ApiError{400,
                    "this model's maximum context length is " + std::to_string(model.context_length) +
                        " tokens; the prompt holds " + std::to_string(prompt_tokens) + " tokens",
                    "invalid_request_error", param, "context_length_exceeded"};
  const int64_t room = model.context_length - prompt_tokens;
  if (request.max_tokens && *request.max_tokens > room)
    return ApiError{400,
                    "this model's maximum context length is " + std::to_string(model.context_length) +
                        " tokens; the prompt holds " + std::to_string(prompt_tokens) + " and max_tokens asks for " +
                        std::to_string(*request.max_tokens),
                    "invalid_request_error", "max_tokens", "context_length_exceeded"};
  out.max_tokens = static_cast<int>(request.max_tokens.value_or(room));
  out.sampling = request.sampling;
  out.has_seed = request.has_seed;
  out.draft = request.draft;
  out.max_draft = request.max_draft;
  out.eos_ids = model.eos_ids;
  if (!request.stop.empty()) out.stop = make_stop_hook(*model.tokenizer, request.stop, model.eos_ids);
  return std::nullopt;
}

}  // namespace ls::server
