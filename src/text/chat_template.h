// Chat templates: render a checkpoint's Jinja chat_template for OpenAI-style messages exactly as transformers'
// apply_chat_template(tokenize=False) does (jinja2 with trim_blocks and lstrip_blocks).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/jinja_template.h"
#include "text/tokenizer.h"

namespace ls::text {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}, ...]
  nlohmann::ordered_json tools;                                        // null, or a list of tool schemas
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();     // more template variables (enable_thinking, ...)
};

// The strings templates read as bos_token, eos_token, pad_token, unk_token ("" = not passed).
struct SpecialTokenStrings {
  std::string bos_token, eos_token, pad_token, unk_token;
};

class ChatTemplate {
 public:
  // Compiles `source`; constructs outside the supported subset are UnsupportedChatTemplate naming them and the line.
  static Result<ChatTemplate> compile(std::string_view source, SpecialTokenStrings special_tokens);
  // The tokenizer's chat_template with its special-token strings; UnsupportedChatTemplate when it has none.
  static Result<ChatTemplate> from_tokenizer(const Tokenizer& tokenizer);

  // The prompt text. A message's content may be a string, null, or a list of {"type": "text", "text": ...} parts,
  // which are joined with "\n" first (as vLLM does for text-only models); other part types are InvalidArgument.
  Result<std::string> render(const ChatRequest& request) const;

 private:
  jinja::Template template_;
  SpecialTokenStrings special_tokens_;
};

}  // namespace ls::text
