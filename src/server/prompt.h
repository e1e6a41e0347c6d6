// From a validated request to the lanes' Request: chat template or prompt text, tokens, context check, sampling,
// eos ids and the stop-string hook.
#pragma once

#include <optional>

#include "lanes/stream.h"
#include "server/api_request.h"
#include "server/served_model.h"

namespace ls::server {

// The lanes' Request for `request`; refusals: a chat template that cannot render the messages, token ids outside
// the vocabulary, a prompt (or prompt + max_tokens) longer than the context.
std::optional<ApiError> make_lanes_request(const CompletionRequest& request, const ServedModel& model, Request& out);

}  // namespace ls::server
