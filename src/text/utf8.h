// UTF-8 helpers for the tokenizer: lossy decoding (maximal-subpart U+FFFD rule), code points, the GPT-2 byte map.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ls::text {

// One decoded code point and the number of bytes it took (1..4).
struct CodePoint {
  char32_t value = 0;
  int length = 0;
};

// The code point at `position` of valid UTF-8 `text` (callers pass sanitized text).
CodePoint decode_code_point(std::string_view text, size_t position);
// Appends the UTF-8 encoding of `code_point`.
void append_utf8(std::string& out, char32_t code_point);
// True when `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);
// `bytes` with every maximal ill-formed subsequence replaced by U+FFFD: the rule Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy both follow.
std::string sanitize_utf8(std::string_view bytes);
// Number of code points in valid UTF-8 `text`.
size_t count_code_points(std::string_view text);

// Unicode White_Space (what Rust's char::is_whitespace and Python's str.isspace accept, minus Python's extras).
bool is_unicode_whitespace(char32_t code_point);

// GPT-2's byte <-> printable-character map used by byte-level BPE: 'Ġ' stands for the space byte, and so on.
const std::array<char32_t, 256>& byte_to_unicode();
// The byte a byte-level character stands for, or -1 when `code_point` is not one of the 256.
int unicode_to_byte(char32_t code_point);

// Lossy UTF-8 decoding fed piece by piece: push() returns only whole characters (and U+FFFD for bytes that can no
// longer become one); finish() flushes a trailing incomplete sequence as one U+FFFD. The concatenation of all outputs
// equals sanitize_utf8 of the concatenated input.
class Utf8Stream {
 public:
  // The text that became whole with these bytes.
  std::string push(std::string_view bytes);
  // The replacement for a held incomplete sequence ("" when none); the stream is empty afterwards.
  std::string finish();
  // Bytes held back because they may still become a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace ls::text
