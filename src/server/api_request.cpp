// Reading OpenAI completion requests: every field typed and bounded, every refusal named after its field.
#include "server/api_request.h"

#include <cmath>
#include <limits>
#include <set>

namespace ls::server {
namespace {

using Json = nlohmann::ordered_json;

ApiError refuse(std::string param, std::string message, std::string code = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

// Fields read as they are; a null counts as absent.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  const Json* find(std::string_view key) const {
    auto found = object_.find(key);
    return found == object_.end() || found->is_null() ? nullptr : &*found;
  }
  std::optional<ApiError> integer(std::string_view key, int64_t low, int64_t high, std::optional<int64_t>& out) const {
    const Json* value = find(key);
    if (!value) return std::nullopt;
    // 3.0 is an integer to a JSON client (Python's json writes floats for computed values).
    const bool whole = value->is_number_float() && std::isfinite(value->get<double>()) &&
                       std::floor(value->get<double>()) == value->get<double>() &&
                       std::fabs(value->get<double>()) < 9e15;
    if (!value->is_number_integer() && !whole)
      return refuse(std::string(key), "'" + std::string(key) + "' must be an integer, got " + value->dump());
    if (value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(INT64_MAX))
      return refuse(std::string(key), "'" + std::string(key) + "' is too large: " + value->dump());
    const int64_t number = whole ? static_cast<int64_t>(value->get<double>()) : value->get<int64_t>();
    if (number < low || number > high)
      return refuse(std::string(key), "'" + std::string(key) + "' is " + std::to_string(number) + ", must be in [" +
                                          std::to_string(low) + ", " + std::to_string(high) + "]");
    out = number;
    return std::nullopt;
  }
  std::optional<ApiError> number(std::string_view key, double low, double high, std::optional<double>& out) const {
    const Json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_number() || !std::isfinite(value->get<double>()))
      return refuse(std::string(key), "'" + std::string(key) + "' must be a number, got " + value->dump());
    const double number = value->get<double>();
    if (number < low || number > high)
      return refuse(std::string(key), "'" + std::string(key) + "' is " + value->dump() + ", must be in [" +
                                          Json(low).dump() + ", " + Json(high).dump() + "]");
    out = number;
    return std::nullopt;
  }
  std::optional<ApiError> boolean(std::string_view key, bool& out) const {
    const Json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_boolean())
      return refuse(std::string(key), "'" + std::string(key) + "' must be true or false, got " + value->dump());
    out = value->get<bool>();
    return std::nullopt;
  }

 private:
  const Json& object_;
};

// Returns the refusal of `expr`, if any (the ApiError counterpart of LS_RETURN_IF_ERROR).
#define LS_API_TRY(expr)                                                \
  do {                                                                  \
    if (std::optional<ApiError> api_error_ = (expr)) return api_error_; \
  } while (0)

// Fields a client may send that this server reads; anything else is refused by name (a typo must not pass).
const std::set<std::string, std::less<>>& known_fields(Endpoint endpoint) {
  static const std::set<std::string, std::less<>> chat = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "stream",
      "stream_options", "n", "top_k", "min_p", "draft", "max_draft", "user", "metadata", "store", "service_tier",
      "logprobs", "top_logprobs", "tools", "tool_choice", "functions", "function_call", "response_format",
      "logit_bias", "presence_penalty", "frequency_penalty", "parallel_tool_calls", "chat_template_kwargs"};
  static const std::set<std::string, std::less<>> completions = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "n",
      "top_k", "min_p", "draft", "max_draft", "user", "logprobs", "echo", "best_of", "suffix", "logit_bias",
      "presence_penalty", "frequency_penalty"};
  return endpoint == Endpoint::ChatCompletions ? chat : completions;
}

// Known fields this server cannot honour: refused unless they ask for nothing (null, false, 0, empty, default).
std::optional<ApiError> refuse_unsupported(const Json& body) {
  for (const auto& [key, value] : body.items()) {
    const bool asks_nothing = value.is_null() || (value.is_boolean() && !value.get<bool>()) ||
                              (value.is_number() && value.get<double>() == 0) ||
                              ((value.is_array() || value.is_object()) && value.empty());
    const bool unsupported = key == "logprobs" || key == "top_logprobs" || key == "tools" || key == "functions" ||
                             key == "logit_bias" || key == "presence_penalty" || key == "frequency_penalty" ||
                             key == "echo" || key == "suffix";
    if (unsupported && !asks_nothing)
      return refuse(key, "'" + key + "' is not supported by this server", "unsupported_parameter");
    if ((key == "tool_choice" || key == "function_call") && !asks_nothing && value != "none" && value != "auto")
      return refuse(key, "'" + key + "' is not supported by this server (no tools)", "unsupported_parameter");
    if (key == "response_format" && !asks_nothing && !(value.is_object() && value.value("type", "") == "text"))
      return refuse(key, "'response_format' other than {\"type\": \"text\"} is not supported", "unsupported_parameter");
    if (key == "best_of" && !(value.is_null() || value == 1))
      return refuse(key, "'best_of' other than 1 is not supported", "unsupported_parameter");
  }
  return std::nullopt;
}

std::optional<ApiError> read_stop(const Json* value, std::vector<std::string>& out) {
  if (!value) return std::nullopt;
  std::vector<Json> items;
  if (value->is_string()) items.push_back(*value);
  else if (value->is_array()) items.assign(value->begin(), value->end());
  else return refuse("stop", "'stop' must be a string or a list of strings, got " + value->dump());
  if (static_cast<int>(items.size()) > kMaxStopStrings)
    return refuse("stop", "'stop' holds " + std::to_string(items.size()) + " strings, at most " +
                              std::to_string(kMaxStopStrings) + " are allowed");
  for (const Json& item : items) {
    if (!item.is_string()) return refuse("stop", "'stop' entries must be strings, got " + item.dump());
    if (item.get<std::string>().empty()) return refuse("stop", "'stop' strings must not be empty");
    out.push_back(item.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const Json* value, Json& out) {
  if (!value) return refuse("messages", "'messages' is required");
  if (!value->is_array()) return refuse("messages", "'messages' must be a list, got " + value->dump().substr(0, 80));
  if (value->empty()) return refuse("messages", "'messages' must hold at least one message");
  for (size_t index = 0; index < value->size(); ++index) {
    const Json& message = (*value)[index];
    const std::string where = "messages[" + std::to_string(index) + "]";
    if (!message.is_object()) return refuse(where, "'" + where + "' must be an object");
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string())
      return refuse(where + ".role", "'" + where + ".role' must be a string");
    const auto content = message.find("content");
    if (content != message.end() && !content->is_string() && !content->is_null() && !content->is_array())
      return refuse(where + ".content", "'" + where + ".content' must be a string, null or a list of parts");
  }
  out = *value;
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const Json* value, CompletionRequest& out) {
  if (!value) return refuse("prompt", "'prompt' is required");
  const Json* prompt = value;
  // A list holding one prompt is that prompt; several prompts in one request are not supported (n = 1 only).
  if (value->is_array() && !value->empty() && ((*value)[0].is_string() || (*value)[0].is_array())) {
    if (value->size() != 1)
      return refuse("prompt", "'prompt' holds " + std::to_string(value->size()) + " prompts; send one per request");
    prompt = &(*value)[0];
  }
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
    return std::nullopt;
  }
  if (!prompt->is_array() || prompt->empty())
    return refuse("prompt", "'prompt' must be a string or a non-empty list of token ids");
  std::vector<int32_t> ids;
  for (const Json& id : *prompt) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return refuse("prompt", "'prompt' token ids must be integers >= 0, got " + id.dump());
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  out.prompt_ids = std::move(ids);
  return std::nullopt;
}

std::optional<ApiError> read_request(const Json& body, Endpoint endpoint, CompletionRequest& out) {
  if (!body.is_object()) return refuse("", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items())
    if (!known_fields(endpoint).contains(key))
      return refuse(key, "unrecognized request argument supplied: " + key, "unrecognized_argument");
  LS_API_TRY(refuse_unsupported(body));
  const Fields fields(body);
  out.endpoint = endpoint;

  const Json* model = fields.find("model");
  if (!model || !model->is_string()) return refuse("model", "'model' is required and must be a string");
  out.model = model->get<std::string>();
  if (endpoint == Endpoint::ChatCompletions) LS_API_TRY(read_messages(fields.find("messages"), out.messages));
  else LS_API_TRY(read_prompt(fields.find("prompt"), out));

  std::optional<int64_t> n, max_tokens, max_completion_tokens, top_k, seed, max_draft;
  LS_API_TRY(fields.integer("n", 1, std::numeric_limits<int64_t>::max(), n));
  if (n && *n != 1) return refuse("n", "'n' must be 1 (one choice per request), got " + std::to_string(*n));
  LS_API_TRY(fields.integer("max_tokens", 1, INT32_MAX, max_tokens));
  LS_API_TRY(fields.integer("max_completion_tokens", 1, INT32_MAX, max_completion_tokens));
  out.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;

  std::optional<double> temperature, top_p, min_p;
  LS_API_TRY(fields.number("temperature", 0.0, 2.0, temperature));
  LS_API_TRY(fields.number("top_p", 0.0, 1.0, top_p));
  if (top_p && *top_p <= 0) return refuse("top_p", "'top_p' must be > 0");
  LS_API_TRY(fields.number("min_p", 0.0, 1.0, min_p));
  LS_API_TRY(fields.integer("top_k", -1, INT32_MAX, top_k));  // -1 = off, as vLLM
  out.sampling.temperature = static_cast<float>(temperature.value_or(1.0));
  out.sampling.top_p = static_cast<float>(top_p.value_or(1.0));
  out.sampling.min_p = static_cast<float>(min_p.value_or(0.0));
  out.sampling.top_k = static_cast<int>(std::max<int64_t>(top_k.value_or(0), 0));
  LS_API_TRY(fields.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed));
  out.has_seed = seed.has_value();
  out.sampling.seed = static_cast<uint64_t>(seed.value_or(0));

  LS_API_TRY(read_stop(fields.find("stop"), out.stop));
  LS_API_TRY(fields.boolean("stream", out.stream));
  if (const Json* options = fields.find("stream_options")) {
    if (!out.stream) return refuse("stream_options", "'stream_options' is only allowed with stream: true");
    if (!options->is_object()) return refuse("stream_options", "'stream_options' must be an object");
    LS_API_TRY(Fields(*options).boolean("include_usage", out.include_usage));
  }
  LS_API_TRY(fields.boolean("draft", out.draft));
  LS_API_TRY(fields.integer("max_draft", 0, 1024, max_draft));
  out.max_draft = static_cast<int>(max_draft.value_or(-1));
  if (const Json* kwargs = fields.find("chat_template_kwargs")) {
    if (!kwargs->is_object()) return refuse("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    out.template_extra = *kwargs;
  }
  return std::nullopt;
}

#undef LS_API_TRY

}  // namespace

std::optional<ApiError> parse_completion_request(std::string_view body, Endpoint endpoint, CompletionRequest& out) {
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "", "invalid_json"};
  return read_request(parsed, endpoint, out);
}

std::string error_body(const ApiError& error) {
  const auto null_if_empty = [](const std::string& text) { return text.empty() ? Json(nullptr) : Json(text); };
  Json body = {{"error",
                {{"message", error.message},
                 {"type", error.type},
                 {"param", null_if_empty(error.param)},
                 {"code", null_if_empty(error.code)}}}};
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace ls::server
