// Route dispatch and the two ways a completion is answered: one JSON body, or server-sent events.
#include "server/routes.h"

#include <optional>

#include "server/api_response.h"
#include "server/prompt.h"
#include "server/reply_text.h"

namespace ls::server {
namespace {

constexpr auto kClientCheck = std::chrono::milliseconds(100);  // how often a waiting handler looks at its client
constexpr std::string_view kJson = "application/json";

// The next event of the reply, or nothing once the client has gone (dropping the ticket then cancels the stream).
std::optional<StreamEvent> wait_event(ReplyTicket& ticket, HttpResponder& responder) {
  while (true) {
    if (std::optional<StreamEvent> event = ticket.next(kClientCheck)) return event;
    if (responder.client_gone()) return std::nullopt;
  }
}

// The error a stream that ended without reaching stop or length reports.
ApiError ended_badly(const StreamEvent& event) {
  if (event.finish == FinishReason::Cancelled)
    return ApiError{503, "the request was cancelled: the server is shutting down", "server_error", "", ""};
  return ApiError{500, "generation failed: " + event.error, "server_error", "", ""};
}

bool ended_well(FinishReason finish) { return finish == FinishReason::Stop || finish == FinishReason::Length; }

}  // namespace

void send_error(HttpResponder& responder, const ApiError& error) {
  responder.send(error.http_status, kJson, error_body(error));
}

void OpenAiRoutes::handle(const HttpRequest& request, HttpResponder& responder) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  const std::string models_prefix = "/v1/models/";
  if (path == "/health" && get) {
    responder.send(200, kJson, health_body(engine_.counters()));
  } else if (!model_.api_key.empty() && request.header("authorization") != "Bearer " + model_.api_key) {
    send_error(responder, ApiError{401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                                   "invalid_request_error", "", "invalid_api_key"});
  } else if (path == "/v1/models" && get) {
    responder.send(200, kJson, models_body(model_));
  } else if (path.starts_with(models_prefix) && get) {
    const std::string name = path.substr(models_prefix.size());
    if (name == model_.name) responder.send(200, kJson, model_body(model_));
    else send_error(responder, model_not_found(name));
  } else if (path == "/v1/chat/completions" && post) {
    complete(request, responder, Endpoint::ChatCompletions);
  } else if (path == "/v1/completions" && post) {
    complete(request, responder, Endpoint::Completions);
  } else if (path == "/health" || path == "/v1/models" || path.starts_with(models_prefix) ||
             path == "/v1/chat/completions" || path == "/v1/completions") {
    send_error(responder, ApiError{405, "method " + request.method + " is not allowed on " + path,
                                   "invalid_request_error", "", "method_not_allowed"});
  } else {
    send_error(responder, ApiError{404, "no route " + request.method + " " + path, "invalid_request_error", "",
                                   "unknown_route"});
  }
}

ApiError OpenAiRoutes::model_not_found(const std::string& name) const {
  return ApiError{404, "the model '" + name + "' does not exist (this server serves '" + model_.name + "')",
                  "invalid_request_error", "model", "model_not_found"};
}

void OpenAiRoutes::complete(const HttpRequest& http_request, HttpResponder& responder, Endpoint endpoint) {
  CompletionRequest request;
  if (std::optional<ApiError> error = parse_completion_request(http_request.body, endpoint, request))
    return send_error(responder, *error);
  if (request.model != model_.name) return send_error(responder, model_not_found(request.model));
  Request lanes_request;
  if (std::optional<ApiError> error = make_lanes_request(request, model_, lanes_request))
    return send_error(responder, *error);
  const int64_t prompt_tokens = static_cast<int64_t>(lanes_request.prompt.size());
  ReplyTicket ticket = engine_.submit(std::move(lanes_request));
  if (request.stream) reply_stream(ticket, responder, request, prompt_tokens);
  else reply_whole(ticket, responder, request, prompt_tokens);
}

void OpenAiRoutes::reply_whole(ReplyTicket& ticket, HttpResponder& responder, const CompletionRequest& request,
                               int64_t prompt_tokens) {
  ReplyText text(*model_.tokenizer, request.stop, model_.eos_ids);
  std::string content;
  Usage usage{prompt_tokens, 0};
  while (true) {
    std::optional<StreamEvent> event = wait_event(ticket, responder);
    if (!event) return;
    usage.completion_tokens += static_cast<int64_t>(event->tokens.size());
    for (int32_t token : event->tokens) content += text.push(token);
    if (event->finish == FinishReason::None) continue;
    if (!ended_well(event->finish)) return send_error(responder, ended_badly(*event));
    content += text.finish();
    const ReplyHeader header = make_reply_header(request.endpoint, model_.name);
    responder.send(200, kJson, completion_body(header, content, event->finish, usage));
    return;
  }
}

void OpenAiRoutes::reply_stream(ReplyTicket& ticket, HttpResponder& responder, const CompletionRequest& request,
                                int64_t prompt_tokens) {
  ReplyText text(*model_.tokenizer, request.stop, model_.eos_ids);
  const ReplyHeader header = make_reply_header(request.endpoint, model_.name);
  const bool usage_chunks = request.include_usage;
  Usage usage{prompt_tokens, 0};
  if (!responder.begin_stream(200, "text/event-stream")) return;
  if (request.endpoint == Endpoint::ChatCompletions &&
      !responder.write_chunk(sse_event(chunk_body(header, /*with_role=*/true, "", FinishReason::None, usage_chunks))))
    return;
  while (true) {
    std::optional<StreamEvent> event = wait_event(ticket, responder);
    if (!event) return;
    usage.completion_tokens += static_cast<int64_t>(event->tokens.size());
    std::string piece;
    for (int32_t token : event->tokens) piece += text.push(token);
    const bool last = event->finish != FinishReason::None;
    if (last && ended_well(event->finish)) piece += text.finish();
    // An empty piece (a character or stop string still incomplete) sends nothing.
    if (!piece.empty() &&
        !responder.write_chunk(sse_event(chunk_body(header, false, piece, FinishReason::None, usage_chunks))))
      return;
    if (!last) continue;
    std::string tail;
    if (ended_well(event->finish)) {
      tail = sse_event(chunk_body(header, false, "", event->finish, usage_chunks));
      if (usage_chunks) tail += sse_event(usage_chunk_body(header, usage));
    } else {
      tail = sse_event(error_body(ended_badly(*event)));
    }
    tail += kSseDone;
    if (responder.write_chunk(tail)) responder.end_stream();
    return;
  }
}

}  // namespace ls::server
