// Statement parsing for the Jinja subset: text, {{ }} output, if / for / set / break / continue / generation.
#include "text/jinja_ast.h"
#include "text/jinja_expression_parser.h"

namespace ls::text::jinja {
namespace {

class Parser : public ExpressionParser {
 public:
  explicit Parser(std::vector<Token> tokens) : ExpressionParser(std::move(tokens)) {}

  Result<std::vector<NodePtr>> parse_all() {
    std::string ender;
    return parse_body({}, ender);
  }

 private:
  // Statements until a block tag whose name is in `enders` (consumed; its name goes to `ender`).
  Result<std::vector<NodePtr>> parse_body(std::initializer_list<std::string_view> enders, std::string& ender) {
    std::vector<NodePtr> body;
    while (true) {
      const Token& token = peek();
      if (token.kind == Token::Kind::End) {
        if (enders.size() == 0) return body;
        return error("missing '" + std::string(*enders.begin()) + "' tag");
      }
      if (token.kind == Token::Kind::Text) {
        auto node = make(NodeKind::Text, token.line);
        node->literal = Value::from_string(take().value);
        body.push_back(std::move(node));
      } else if (token.kind == Token::Kind::VariableBegin) {
        take();
        auto node = make(NodeKind::Output, token.line);
        LS_ASSIGN_OR_RETURN(NodePtr value, parse_tuple(true));
        node->children.push_back(std::move(value));
        if (peek().kind != Token::Kind::VariableEnd) return error("expected '}}', found '" + peek().value + "'");
        take();
        body.push_back(std::move(node));
      } else if (token.kind == Token::Kind::BlockBegin) {
        const Token& name = peek(1);
        if (name.kind != Token::Kind::Name) return error("expected a statement name");
        for (std::string_view candidate : enders)
          if (name.value == candidate) {
            take();
            ender = take().value;
            return body;
          }
        take();
        LS_ASSIGN_OR_RETURN(NodePtr statement, parse_statement());
        body.push_back(std::move(statement));
      } else {
        return error("unexpected '" + token.value + "'");
      }
    }
  }

  Result<NodePtr> parse_statement() {
    const Token keyword = take();
    const std::string& name = keyword.value;
    if (name == "if") return parse_if(keyword.line);
    if (name == "for") return parse_for(keyword.line);
    if (name == "set") return parse_set(keyword.line);
    if (name == "break" || name == "continue") {
      LS_RETURN_IF_ERROR(expect_block_end());
      return make(name == "break" ? NodeKind::Break : NodeKind::Continue, keyword.line);
    }
    if (name == "generation") {
      LS_RETURN_IF_ERROR(expect_block_end());
      auto node = make(NodeKind::Scope, keyword.line);
      std::string ender;
      LS_ASSIGN_OR_RETURN(node->body, parse_body({"endgeneration"}, ender));
      LS_RETURN_IF_ERROR(expect_block_end());
      return node;
    }
    return unsupported("'" + name + "'", keyword.line);
  }

  Result<NodePtr> parse_if(int line) {
    auto node = make(NodeKind::If, line);
    LS_ASSIGN_OR_RETURN(NodePtr condition, parse_tuple(true));
    node->children.push_back(std::move(condition));
    LS_RETURN_IF_ERROR(expect_block_end());
    std::string ender;
    LS_ASSIGN_OR_RETURN(node->body, parse_body({"elif", "else", "endif"}, ender));
    if (ender == "elif") {
      LS_ASSIGN_OR_RETURN(NodePtr nested, parse_if(peek().line));
      node->else_body.push_back(std::move(nested));
      return node;  // the nested if consumed the endif
    }
    if (ender == "else") {
      LS_RETURN_IF_ERROR(expect_block_end());
      LS_ASSIGN_OR_RETURN(node->else_body, parse_body({"endif"}, ender));
    }
    LS_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  Status parse_targets(std::vector<std::string>& targets) {
    const bool parenthesized = at_operator("(");
    if (parenthesized) take();
    do {
      if (peek().kind != Token::Kind::Name) return error("expected a variable name, found '" + peek().value + "'");
      targets.push_back(take().value);
    } while (at_operator(",") && (take(), true));
    if (parenthesized) LS_RETURN_IF_ERROR(expect_operator(")"));
    return ok_status();
  }

  Result<NodePtr> parse_for(int line) {
    auto node = make(NodeKind::For, line);
    LS_RETURN_IF_ERROR(parse_targets(node->targets));
    if (!at_name("in")) return error("expected 'in' in for loop");
    take();
    LS_ASSIGN_OR_RETURN(NodePtr iterable, parse_tuple(false));
    node->children.push_back(std::move(iterable));
    if (at_name("if")) {
      take();
      LS_ASSIGN_OR_RETURN(NodePtr filter, parse_expression());
      node->children.push_back(std::move(filter));
    } else {
      node->children.push_back(nullptr);
    }
    if (at_name("recursive")) return unsupported("'for ... recursive'", line);
    LS_RETURN_IF_ERROR(expect_block_end());
    std::string ender;
    LS_ASSIGN_OR_RETURN(node->body, parse_body({"else", "endfor"}, ender));
    if (ender == "else") {
      LS_RETURN_IF_ERROR(expect_block_end());
      LS_ASSIGN_OR_RETURN(node->else_body, parse_body({"endfor"}, ender));
    }
    LS_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

  Result<NodePtr> parse_set(int line) {
    auto node = make(NodeKind::Set, line);
    if (peek().kind == Token::Kind::Name && peek(1).kind == Token::Kind::Operator && peek(1).value == ".") {
      node->targets.push_back(take().value);
      take();
      if (peek().kind != Token::Kind::Name) return error("expected an attribute name after '.'");
      node->attribute = take().value;
    } else {
      LS_RETURN_IF_ERROR(parse_targets(node->targets));
    }
    if (peek().kind == Token::Kind::BlockEnd) {
      if (!node->attribute.empty() || node->targets.size() != 1) return error("a set block assigns one name");
      take();
      node->kind = NodeKind::SetBlock;
      std::string ender;
      LS_ASSIGN_OR_RETURN(node->body, parse_body({"endset"}, ender));
      LS_RETURN_IF_ERROR(expect_block_end());
      return node;
    }
    if (at_operator("|")) return unsupported("'set' block with a filter", line);
    LS_RETURN_IF_ERROR(expect_operator("="));
    LS_ASSIGN_OR_RETURN(NodePtr value, parse_tuple(true));
    node->children.push_back(std::move(value));
    LS_RETURN_IF_ERROR(expect_block_end());
    return node;
  }

};

}  // namespace

Result<std::vector<NodePtr>> parse_template(std::string_view source) {
  LS_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source));
  Parser parser(std::move(tokens));
  return parser.parse_all();
}

}  // namespace ls::text::jinja
