// The OpenAI routes: GET /health, GET /v1/models[/{id}], POST /v1/chat/completions, POST /v1/completions.
#pragma once

#include "server/api_request.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "server/served_model.h"

namespace ls::server {

class OpenAiRoutes {
 public:
  // Borrows both; they outlive the HTTP server that calls handle().
  OpenAiRoutes(const ServedModel& model, Engine& engine) : model_(model), engine_(engine) {}

  // Answers one request; never throws. Bad input gets a 4xx in OpenAI's error shape and costs nothing else.
  void handle(const HttpRequest& request, HttpResponder& responder);

 private:
  void complete(const HttpRequest& request, HttpResponder& responder, Endpoint endpoint);
  // 404 model_not_found for a model id this server does not serve.
  ApiError model_not_found(const std::string& name) const;
  // Waits for the whole reply, then answers once.
  void reply_whole(ReplyTicket& ticket, HttpResponder& responder, const CompletionRequest& request,
                   int64_t prompt_tokens);
  // Answers with server-sent events as tokens come.
  void reply_stream(ReplyTicket& ticket, HttpResponder& responder, const CompletionRequest& request,
                    int64_t prompt_tokens);

  const ServedModel& model_;
  Engine& engine_;
};

// Sends `error` as a JSON reply.
void send_error(HttpResponder& responder, const ApiError& error);

}  // namespace ls::server
