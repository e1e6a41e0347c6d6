// OpenAI reply bodies, written with nlohmann-json (invalid UTF-8 becomes U+FFFD rather than an exception).
#include "server/api_response.h"

#include <atomic>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace ls::server {
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& body) { return body.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json finish_json(FinishReason finish) {
  if (finish == FinishReason::None) return nullptr;
  return finish_reason_name(finish);
}

Json usage_json(Usage usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

Json base(const ReplyHeader& header, const char* object) {
  return {{"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

}  // namespace

ReplyHeader make_reply_header(Endpoint endpoint, const std::string& model) {
  static std::atomic<uint64_t> counter{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  char id[64];
  std::snprintf(id, sizeof(id), "%s-%llx%06llx", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(now), static_cast<unsigned long long>(counter++));
  return ReplyHeader{id, now, model, endpoint};
}

std::string completion_body(const ReplyHeader& header, std::string_view text, FinishReason finish, Usage usage) {
  const bool chat = header.endpoint == Endpoint::ChatCompletions;
  Json choice = {{"index", 0}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_json(finish);
  Json body = base(header, chat ? "chat.completion" : "text_completion");
  body["choices"] = Json::array({choice});
  body["usage"] = usage_json(usage);
  return dump(body);
}

std::string chunk_body(const ReplyHeader& header, bool with_role, std::string_view text, FinishReason finish,
                       bool with_usage) {
  const bool chat = header.endpoint == Endpoint::ChatCompletions;
  Json choice = {{"index", 0}};
  if (chat) {
    Json delta = Json::object();
    if (with_role) delta["role"] = "assistant";
    if (with_role || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_json(finish);
  Json body = base(header, chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = Json::array({choice});
  if (with_usage) body["usage"] = nullptr;
  return dump(body);
}

std::string usage_chunk_body(const ReplyHeader& header, Usage usage) {
  Json body = base(header, header.endpoint == Endpoint::ChatCompletions ? "chat.completion.chunk" : "text_completion");
  body["choices"] = Json::array();
  body["usage"] = usage_json(usage);
  return dump(body);
}

std::string model_body(const ServedModel& model) {
  return dump(Json{{"id", model.name}, {"object", "model"}, {"created", model.created}, {"owned_by", "lanespark"}});
}

std::string models_body(const ServedModel& model) {
  return dump(Json{{"object", "list"}, {"data", Json::array({Json::parse(model_body(model))})}});
}

std::string health_body(const EngineCounters& counters) {
  return dump(Json{{"status", "ok"},
                   {"open_requests", counters.open_requests},
                   {"rounds", counters.rounds},
                   {"tokens_generated", counters.tokens_generated},
                   {"drafts_verified", counters.drafts_verified},
                   {"drafts_accepted", counters.drafts_accepted}});
}

std::string sse_event(std::string_view data) {
  std::string event = "data: ";
  event.append(data);
  event += "\n\n";
  return event;
}

}  // namespace ls::server
