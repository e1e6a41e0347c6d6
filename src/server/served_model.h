// What the server knows about the model it serves: its name, tokenizer, chat template, eos ids and context.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ls::server {

struct ServedModel {
  std::string name;                                  // the id clients send as "model"
  const text::Tokenizer* tokenizer = nullptr;        // borrowed; outlives the server
  std::optional<text::ChatTemplate> chat_template;   // none: chat requests are refused by name
  std::string chat_template_error;                   // why there is none
  std::vector<int32_t> eos_ids;                      // end a reply (the target's eos and the tokenizer's stop ids)
  int64_t context_length = 0;                        // prompt + reply positions, at most
  int64_t created = 0;                               // unix seconds the server started (/v1/models)
  std::string api_key;                               // non-empty: /v1/* needs "Authorization: Bearer <api_key>"
};

}  // namespace ls::server
