// Jinja lexing: tags found left to right, whitespace control applied to the text between them, expressions
// split into names, numbers, strings (Python escapes) and operators.
#include "text/jinja_lexer.h"

#include <algorithm>

#include "text/utf8.h"

namespace ls::text::jinja {
namespace {

Status syntax_error(int line, const std::string& message) {
  return Status(ErrorCode::UnsupportedChatTemplate, "template syntax error at line " + std::to_string(line) + ": " + message);
}

int line_at(std::string_view source, size_t position) {
  return 1 + static_cast<int>(std::count(source.begin(), source.begin() + position, '\n'));
}

// Python's str.rstrip() of `text`.
void rstrip_python(std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!is_python_space(decode_code_point(text, start).value)) break;
    end = start;
  }
  text.resize(end);
}

// Python string-literal escapes, as Jinja decodes them ("unicode-escape"); unknown escapes stay as written.
std::string unescape(std::string_view body) {
  std::string out;
  for (size_t position = 0; position < body.size(); ++position) {
    if (body[position] != '\\' || position + 1 >= body.size()) {
      out.push_back(body[position]);
      continue;
    }
    const char next = body[++position];
    auto hex_escape = [&](int digits) {
      char32_t code_point = 0;
      for (int index = 1; index <= digits; ++index) {
        if (position + index >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[position + index]))) return false;
        const char digit = static_cast<char>(std::tolower(static_cast<unsigned char>(body[position + index])));
        code_point = code_point * 16 + static_cast<char32_t>(digit <= '9' ? digit - '0' : digit - 'a' + 10);
      }
      append_utf8(out, code_point);
      position += digits;
      return true;
    };
    switch (next) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case '\n': break;  // line continuation
      case 'x': if (!hex_escape(2)) out += "\\x"; break;
      case 'u': if (!hex_escape(4)) out += "\\u"; break;
      case 'U': if (!hex_escape(8)) out += "\\U"; break;
      default:
        if (next >= '0' && next <= '7') {
          int value = 0, digits = 0;
          while (digits < 3 && position < body.size() && body[position] >= '0' && body[position] <= '7') {
            value = value * 8 + (body[position++] - '0');
            ++digits;
          }
          --position;
          append_utf8(out, static_cast<char32_t>(value));
        } else {
          out.push_back('\\');
          out.push_back(next);
        }
    }
  }
  return out;
}

constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                           "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

}  // namespace

bool is_python_space(char32_t code_point) {
  return is_unicode_whitespace(code_point) || (code_point >= 0x1C && code_point <= 0x1F);
}

Result<std::vector<Token>> lex(std::string_view raw_source) {
  // Newlines normalized to \n, one trailing newline dropped (keep_trailing_newline=False).
  std::string source;
  source.reserve(raw_source.size());
  for (size_t position = 0; position < raw_source.size(); ++position) {
    if (raw_source[position] == '\r') {
      source.push_back('\n');
      if (position + 1 < raw_source.size() && raw_source[position + 1] == '\n') ++position;
    } else {
      source.push_back(raw_source[position]);
    }
  }
  if (!source.empty() && source.back() == '\n') source.pop_back();

  std::vector<Token> tokens;
  size_t position = 0;
  bool line_starting = true;
  while (position < source.size()) {
    size_t tag = position;
    while (true) {
      tag = source.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= source.size()) {
        tag = std::string::npos;
        break;
      }
      const char kind = source[tag + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++tag;
    }
    std::string text = source.substr(position, tag == std::string::npos ? std::string::npos : tag - position);
    if (tag == std::string::npos) {
      if (!text.empty()) tokens.push_back({Token::Kind::Text, text, line_at(source, position)});
      break;
    }
    const char kind = source[tag + 1];
    const char control = tag + 2 < source.size() ? source[tag + 2] : '\0';
    const bool block_like = kind == '%' || kind == '#';
    if (control == '-') {
      rstrip_python(text);
    } else if (control != '+' && block_like) {  // lstrip_blocks
      const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (line_begin > 0 || line_starting) {
        bool blank = true;
        for (size_t index = line_begin; index < text.size(); ++index) blank &= text[index] == ' ' || text[index] == '\t';
        if (blank) text.resize(line_begin);
      }
    }
    if (!text.empty()) tokens.push_back({Token::Kind::Text, text, line_at(source, position)});
    const int line = line_at(source, tag);
    size_t cursor = tag + 2 + (control == '-' || control == '+' ? 1 : 0);
    char end_control = '\0';
    if (kind == '#') {
      const size_t close = source.find("#}", cursor);
      if (close == std::string::npos) return syntax_error(line, "comment is never closed");
      if (close > cursor && (source[close - 1] == '-' || source[close - 1] == '+')) end_control = source[close - 1];
      cursor = close + 2;
    } else {
      const std::string_view closing = kind == '{' ? "}}" : "%}";
      tokens.push_back({kind == '{' ? Token::Kind::VariableBegin : Token::Kind::BlockBegin, "", line});
      const size_t first_expression_token = tokens.size();
      bool closed = false;
      while (cursor < source.size()) {
        const char current = source[cursor];
        if ((current == '-' || current == '+') && source.compare(cursor + 1, 2, closing) == 0) {
          end_control = current;
          cursor += 3;
          closed = true;
          break;
        }
        if (source.compare(cursor, 2, closing) == 0) {
          cursor += 2;
          closed = true;
          break;
        }
        const int token_line = line_at(source, cursor);
        if (std::isspace(static_cast<unsigned char>(current))) {
          ++cursor;
        } else if (std::isalpha(static_cast<unsigned char>(current)) || current == '_') {
          size_t end = cursor;
          while (end < source.size() && (std::isalnum(static_cast<unsigned char>(source[end])) || source[end] == '_')) ++end;
          tokens.push_back({Token::Kind::Name, source.substr(cursor, end - cursor), token_line});
          cursor = end;
        } else if (std::isdigit(static_cast<unsigned char>(current))) {
          size_t end = cursor;
          bool is_float = false;
          while (end < source.size() && (std::isdigit(static_cast<unsigned char>(source[end])) || source[end] == '_')) ++end;
          if (end + 1 < source.size() && source[end] == '.' && std::isdigit(static_cast<unsigned char>(source[end + 1]))) {
            is_float = true;
            ++end;
            while (end < source.size() && std::isdigit(static_cast<unsigned char>(source[end]))) ++end;
          }
          if (end < source.size() && (source[end] == 'e' || source[end] == 'E')) {
            size_t exponent = end + 1;
            if (exponent < source.size() && (source[exponent] == '+' || source[exponent] == '-')) ++exponent;
            if (exponent < source.size() && std::isdigit(static_cast<unsigned char>(source[exponent]))) {
              is_float = true;
              end = exponent;
              while (end < source.size() && std::isdigit(static_cast<unsigned char>(source[end]))) ++end;
            }
          }
          std::string digits = source.substr(cursor, end - cursor);
          digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
          tokens.push_back({is_float ? Token::Kind::Float : Token::Kind::Integer, digits, token_line});
          cursor = end;
        } else if (current == '\'' || current == '"') {
          size_t end = cursor + 1;
          while (end < source.size() && source[end] != current) end += source[end] == '\\' ? 2 : 1;
          if (end >= source.size()) return syntax_error(token_line, "string literal is never closed");
          tokens.push_back({Token::Kind::String, unescape(std::string_view(source).substr(cursor + 1, end - cursor - 1)), token_line});
          cursor = end + 1;
        } else {
          bool matched = false;
          for (std::string_view op : kOperators)
            if (source.compare(cursor, op.size(), op) == 0) {
              tokens.push_back({Token::Kind::Operator, std::string(op), token_line});
              cursor += op.size();
              matched = true;
              break;
            }
          if (!matched) return syntax_error(token_line, std::string("unexpected character '") + current + "'");
        }
      }
      if (!closed) return syntax_error(line, std::string("tag is never closed with '") + std::string(closing) + "'");
      if (kind == '%' && tokens.size() > first_expression_token && tokens[first_expression_token].value == "raw")
        return Status(ErrorCode::UnsupportedChatTemplate, "construct 'raw' at line " + std::to_string(line) + " is not supported");
      tokens.push_back({kind == '{' ? Token::Kind::VariableEnd : Token::Kind::BlockEnd, "", line});
    }
    line_starting = false;
    if (end_control == '-') {
      while (cursor < source.size()) {
        const CodePoint point = decode_code_point(source, cursor);
        if (!is_python_space(point.value)) break;
        line_starting = source[cursor] == '\n';
        cursor += point.length;
      }
    } else if (end_control != '+' && block_like && cursor < source.size() && source[cursor] == '\n') {  // trim_blocks
      ++cursor;
      line_starting = true;
    }
    position = cursor;
  }
  tokens.push_back({Token::Kind::End, "", line_at(source, source.size())});
  return tokens;
}

}  // namespace ls::text::jinja
