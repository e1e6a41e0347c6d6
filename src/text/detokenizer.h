// Streaming detokenizer: ids in one at a time, text out only when it is whole UTF-8.
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer.h"
#include "text/utf8.h"

namespace ls::text {

// The concatenation of every push() and the final flush() equals Tokenizer::decode of all the ids, byte for byte.
// Borrows the tokenizer, which must outlive it.
class Detokenizer {
 public:
  Detokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // The text that `id` completes (may be "" while a character is split across tokens).
  std::string push(int32_t id);
  // Whatever is still held (an incomplete character comes out as U+FFFD); the stream can be reused afterwards.
  std::string flush();
  // Bytes held back waiting for the rest of a character.
  size_t pending_bytes() const { return stream_.pending_bytes(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  bool emitted_any_ = false;
  Utf8Stream stream_;
};

}  // namespace ls::text
