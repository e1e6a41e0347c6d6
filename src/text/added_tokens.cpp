// Leftmost-longest matching of added tokens over a byte trie, then the lstrip/rstrip/single_word adjustments.
#include "text/added_tokens.h"

#include "text/regex.h"
#include "text/utf8.h"

namespace ls::text {
namespace {

// The code point that ends / starts `text` (valid UTF-8, non-empty).
char32_t last_code_point(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return decode_code_point(text, start).value;
}

// Unicode \w, asked of PCRE2 so that it agrees with the split regexes' notion of a word character.
bool is_word_character(char32_t code_point) {
  if (code_point < 0x80)
    return (code_point >= '0' && code_point <= '9') || (code_point >= 'a' && code_point <= 'z') ||
           (code_point >= 'A' && code_point <= 'Z') || code_point == '_';
  static const Result<Regex> word = Regex::compile(R"(^\w$)");
  std::string character;
  append_utf8(character, code_point);
  auto matches = word->find_all(character);
  return matches.ok() && !matches->empty();
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  tokens_.clear();
  first_byte_.fill(false);
  for (size_t index = 0; index < tokens.size(); ++index) {
    const std::string& pattern = patterns[index];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (char byte : pattern) {
      const auto key = static_cast<unsigned char>(byte);
      int32_t child = -1;
      for (const auto& [edge, target] : nodes_[node].children)
        if (edge == key) child = target;
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(key, child);
        nodes_.push_back(Node{});
      }
      node = child;
    }
    // The first token with a given text wins, like the first pattern of an aho-corasick automaton.
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(tokens[index]);
    }
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_match(std::string_view text, size_t position, size_t& length) const {
  int32_t node = 0, best = -1;
  for (size_t offset = position; offset < text.size(); ++offset) {
    const auto key = static_cast<unsigned char>(text[offset]);
    int32_t child = -1;
    for (const auto& [edge, target] : nodes_[node].children)
      if (edge == key) child = target;
    if (child < 0) break;
    node = child;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      length = offset + 1 - position;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t emitted = 0;  // end of what has been emitted so far
  size_t search = 0;   // where the automaton resumes (after the previous raw match)
  while (search < text.size() && !tokens_.empty()) {
    size_t position = search, length = 0;
    int32_t found = -1;
    for (; position < text.size(); ++position) {
      if (!first_byte_[static_cast<unsigned char>(text[position])]) continue;
      found = longest_match(text, position, length);
      if (found >= 0) break;
    }
    if (found < 0) break;
    search = position + length;
    const AddedToken& token = tokens_[found];
    size_t begin = position, end = position + length;
    if (token.single_word) {
      const bool word_before = begin > 0 && is_word_character(last_code_point(text.substr(0, begin)));
      const bool word_after = end < text.size() && is_word_character(decode_code_point(text, end).value);
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      size_t new_begin = begin;
      while (new_begin > 0) {
        size_t start = new_begin - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        if (!is_unicode_whitespace(decode_code_point(text, start).value)) break;
        new_begin = start;
      }
      begin = std::max(new_begin, emitted);
    }
    if (token.rstrip) {
      while (end < text.size()) {
        const CodePoint point = decode_code_point(text, end);
        if (!is_unicode_whitespace(point.value)) break;
        end += point.length;
      }
    }
    if (emitted < begin) out.push_back({text.substr(emitted, begin - emitted), -1});
    out.push_back({text.substr(begin, end - begin), token.id});
    emitted = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace ls::text
