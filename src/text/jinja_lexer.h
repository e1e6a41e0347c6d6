// Jinja lexer for chat templates: text and tags, with transformers' whitespace settings (trim_blocks,
// lstrip_blocks, keep_trailing_newline off) and the -/+ whitespace controls applied while lexing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ls::text::jinja {

struct Token {
  enum class Kind { Text, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };
  Kind kind = Kind::End;
  std::string value;  // Text: the text; Name/Operator: its spelling; String: the unescaped contents; numbers: digits
  int line = 1;
};

// The tokens of `source`; a malformed tag is UnsupportedChatTemplate naming the line.
Result<std::vector<Token>> lex(std::string_view source);

// Python's str.isspace for one code point (the set Jinja's whitespace control strips).
bool is_python_space(char32_t code_point);

}  // namespace ls::text::jinja
