// A PCRE2 regular expression compiled with UTF + UCP (Unicode properties) and JIT, for pre-tokenizer splits.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ls::text {

// Byte offsets [begin, end) of one match.
struct Match {
  size_t begin = 0;
  size_t end = 0;
};

class Regex {
 public:
  // Compiles `pattern`; a pattern PCRE2 rejects is BadTokenizer naming the offset and PCRE2's message.
  static Result<Regex> compile(std::string_view pattern);
  // A pattern that matches `literal` exactly (tokenizer.json's {"String": ...} patterns).
  static Result<Regex> literal(std::string_view literal);

  // Successive non-overlapping matches in valid UTF-8 `text`, left to right. An empty match is reported and the
  // next search starts one character later (as the oniguruma iterator Hugging Face uses does).
  Result<std::vector<Match>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;  // shared so that copies of a Tokenizer reuse one compiled, immutable program
};

}  // namespace ls::text
