// Added tokens (special or not) found in raw text before pre-tokenization, with Hugging Face's lstrip / rstrip /
// single_word rules, matched leftmost-longest like tokenizers' aho-corasick split.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ls::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // the match swallows whitespace on its right
  bool single_word = false;  // only matches when not glued to word characters
  bool normalized = false;   // matched in normalized text (after the normalizer) instead of raw text
};

// A stretch of text: an added token (id >= 0) or text left for the normalizer and pre-tokenizer (id == -1).
struct TextSegment {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  // Indexes `patterns[i]` as the text that stands for `tokens[i]`.
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into added tokens and the text between them (tokenizers' AddedVocabulary::find_matches).
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
    int32_t token = -1;                                         // index into tokens_ when a pattern ends here
  };
  // Index of the longest pattern starting at `position` and its length, or -1.
  int32_t longest_match(std::string_view text, size_t position, size_t& length) const;

  std::vector<Node> nodes_;
  std::vector<AddedToken> tokens_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace ls::text
