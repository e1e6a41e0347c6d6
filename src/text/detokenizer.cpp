// Streaming detokenizer over the tokenizer's per-id bytes and an incremental lossy UTF-8 decoder.
#include "text/detokenizer.h"

namespace ls::text {

std::string Detokenizer::push(int32_t id) {
  if (!tokenizer_.has_id(id)) return "";
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return "";
  std::string out;
  if (tokenizer_.joins_with_space() && emitted_any_) out = stream_.push(" ");
  emitted_any_ = true;
  out += stream_.push(tokenizer_.token_bytes(id));
  return out;
}

std::string Detokenizer::flush() {
  emitted_any_ = false;
  return stream_.finish();
}

}  // namespace ls::text
