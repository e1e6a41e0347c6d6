// Messages and tools to template variables (what transformers passes to render), then the Jinja renderer.
#include "text/chat_template.h"

namespace ls::text {
namespace {

// Validates the messages and joins list contents of text parts.
Result<nlohmann::ordered_json> normalize_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return Status(ErrorCode::InvalidArgument, "messages must be a list");
  nlohmann::ordered_json out = messages;
  for (size_t index = 0; index < out.size(); ++index) {
    auto& message = out[index];
    if (!message.is_object()) return Status(ErrorCode::InvalidArgument, "message " + std::to_string(index) + " is not an object");
    if (!message.contains("role") || !message["role"].is_string())
      return Status(ErrorCode::InvalidArgument, "message " + std::to_string(index) + " has no string role");
    if (!message.contains("content") || !message["content"].is_array()) continue;
    std::string joined;
    const auto& parts = message["content"];
    for (size_t part = 0; part < parts.size(); ++part) {
      const auto& item = parts[part];
      const std::string type = item.is_object() && item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>() : "";
      if (type != "text" || !item.contains("text") || !item["text"].is_string())
        return Status(ErrorCode::InvalidArgument, "message " + std::to_string(index) + " content part " + std::to_string(part) +
                                                      " has type '" + type + "'; only text parts are supported");
      joined += (part ? "\n" : "") + item["text"].get<std::string>();
    }
    message["content"] = joined;
  }
  return out;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::compile(std::string_view source, SpecialTokenStrings special_tokens) {
  ChatTemplate chat;
  LS_ASSIGN_OR_RETURN(chat.template_, jinja::Template::compile(source));
  chat.special_tokens_ = std::move(special_tokens);
  return chat;
}

Result<ChatTemplate> ChatTemplate::from_tokenizer(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty())
    return Status(ErrorCode::UnsupportedChatTemplate, "the tokenizer has no chat_template");
  return compile(tokenizer.chat_template(),
                 {tokenizer.bos_token(), tokenizer.eos_token(), tokenizer.pad_token(), tokenizer.unk_token()});
}

Result<std::string> ChatTemplate::render(const ChatRequest& request) const {
  LS_ASSIGN_OR_RETURN(nlohmann::ordered_json messages, normalize_messages(request.messages));
  if (!request.tools.is_null() && !request.tools.is_array())
    return Status(ErrorCode::InvalidArgument, "tools must be a list");
  jinja::Dict variables;
  variables.set("messages", jinja::from_json(messages));
  variables.set("tools", jinja::from_json(request.tools));
  variables.set("documents", jinja::Value::none());
  variables.set("add_generation_prompt", jinja::Value::from_bool(request.add_generation_prompt));
  const std::pair<const char*, const std::string*> tokens[] = {{"bos_token", &special_tokens_.bos_token},
                                                               {"eos_token", &special_tokens_.eos_token},
                                                               {"pad_token", &special_tokens_.pad_token},
                                                               {"unk_token", &special_tokens_.unk_token}};
  for (const auto& [name, value] : tokens)
    if (!value->empty()) variables.set(name, jinja::Value::from_string(*value));
  if (request.extra.is_object())
    for (const auto& [key, value] : request.extra.items()) variables.set(key, jinja::from_json(value));
  return template_.render(variables);
}

}  // namespace ls::text
