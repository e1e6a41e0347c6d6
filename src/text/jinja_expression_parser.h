// Expression parsing for the Jinja subset, with Jinja's operator precedence (jinja2/parser.py order:
// conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary, filters and tests bind tightest).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

namespace ls::text::jinja {

// A token cursor and the expression grammar; the statement parser (jinja_parser.cpp) builds on it.
class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  using Level = Result<NodePtr> (ExpressionParser::*)();

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(position_ + ahead, tokens_.size() - 1)]; }
  const Token& take() { return tokens_[std::min(position_++, tokens_.size() - 1)]; }
  bool at_operator(std::string_view op) const { return peek().kind == Token::Kind::Operator && peek().value == op; }
  bool at_name(std::string_view name) const { return peek().kind == Token::Kind::Name && peek().value == name; }

  Status error(const std::string& message) const {
    return Status(ErrorCode::UnsupportedChatTemplate,
                  "template syntax error at line " + std::to_string(peek().line) + ": " + message);
  }
  Status unsupported(const std::string& construct, int line) const {
    return Status(ErrorCode::UnsupportedChatTemplate,
                  "construct " + construct + " at line " + std::to_string(line) + " is not supported");
  }
  Status expect_operator(std::string_view op) {
    if (!at_operator(op)) return error("expected '" + std::string(op) + "', found '" + peek().value + "'");
    take();
    return ok_status();
  }
  Status expect_block_end() {
    if (peek().kind != Token::Kind::BlockEnd) return error("expected '%}', found '" + peek().value + "'");
    take();
    return ok_status();
  }
  NodePtr make(NodeKind kind, int line) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = line;
    return node;
  }


  bool at_expression_end() const;
  Result<NodePtr> parse_tuple(bool with_conditional);
  Result<NodePtr> parse_expression();
  NodePtr binary(std::string op, NodePtr left, NodePtr right, int line);
  Result<NodePtr> parse_or();
  Result<NodePtr> parse_and();
  Result<NodePtr> parse_not();
  Result<NodePtr> parse_compare();
  Result<NodePtr> parse_level(std::initializer_list<std::string_view> ops, Level next);
  Result<NodePtr> parse_math1();
  Result<NodePtr> parse_concat();
  Result<NodePtr> parse_math2();
  Result<NodePtr> parse_pow();
  Result<NodePtr> parse_unary_filtered();
  Result<NodePtr> parse_unary(bool with_filter);
  Result<NodePtr> parse_primary();
  Result<NodePtr> parse_postfix(NodePtr node);
  Result<NodePtr> parse_subscript(NodePtr target);
  Status parse_arguments(Node& node);
  Result<NodePtr> parse_filters(NodePtr node);

  std::vector<Token> tokens_;
  size_t position_ = 0;
};

}  // namespace ls::text::jinja
