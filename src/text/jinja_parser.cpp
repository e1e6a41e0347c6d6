// Recursive-descent parser for the Jinja subset, with Jinja's operator precedence (jinja2/parser.py order:
// conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary, filters and tests bind tightest).
#include <set>

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

namespace ls::text::jinja {
namespace {

const std::set<std::string, std::less<>> kFilters = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join", "last", "length",
    "list", "lower", "replace", "reverse", "safe", "string", "title", "tojson", "trim", "upper"};
const std::set<std::string, std::less<>> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float", "ge", "gt", "in",
    "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
    "string", "true", "undefined", "upper"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<std::vector<NodePtr>> parse_all() {
    std::string ender;
    return parse_body({}, ender);
  }

 private:
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

  bool at_expression_end() const {
    const Token& token = peek();
    return token.kind == Token::Kind::VariableEnd || token.kind == Token::Kind::BlockEnd ||
           token.kind == Token::Kind::End || (token.kind == Token::Kind::Operator && (token.value == ")" || token.value == "]" || token.value == "}")) ||
           (token.kind == Token::Kind::Name && (token.value == "if" || token.value == "in"));
  }

  Result<NodePtr> parse_tuple(bool with_conditional) {
    const int line = peek().line;
    LS_ASSIGN_OR_RETURN(NodePtr first, with_conditional ? parse_expression() : parse_or());
    if (!at_operator(",")) return first;
    auto tuple = make(NodeKind::TupleLiteral, line);
    tuple->children.push_back(std::move(first));
    while (at_operator(",")) {
      take();
      if (at_expression_end()) break;
      LS_ASSIGN_OR_RETURN(NodePtr item, with_conditional ? parse_expression() : parse_or());
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  Result<NodePtr> parse_expression() {
    LS_ASSIGN_OR_RETURN(NodePtr value, parse_or());
    while (at_name("if")) {
      const int line = take().line;
      auto node = make(NodeKind::Conditional, line);
      LS_ASSIGN_OR_RETURN(NodePtr condition, parse_or());
      node->children.push_back(std::move(condition));
      node->children.push_back(std::move(value));
      if (at_name("else")) {
        take();
        LS_ASSIGN_OR_RETURN(NodePtr otherwise, parse_expression());
        node->children.push_back(std::move(otherwise));
      } else {
        node->children.push_back(nullptr);
      }
      value = std::move(node);
    }
    return value;
  }

  NodePtr binary(std::string op, NodePtr left, NodePtr right, int line) {
    auto node = make(NodeKind::Binary, line);
    node->name = std::move(op);
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return node;
  }

  Result<NodePtr> parse_or() {
    LS_ASSIGN_OR_RETURN(NodePtr left, parse_and());
    while (at_name("or")) {
      const int line = take().line;
      LS_ASSIGN_OR_RETURN(NodePtr right, parse_and());
      left = binary("or", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<NodePtr> parse_and() {
    LS_ASSIGN_OR_RETURN(NodePtr left, parse_not());
    while (at_name("and")) {
      const int line = take().line;
      LS_ASSIGN_OR_RETURN(NodePtr right, parse_not());
      left = binary("and", std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<NodePtr> parse_not() {
    if (at_name("not")) {
      auto node = make(NodeKind::Unary, take().line);
      node->name = "not";
      LS_ASSIGN_OR_RETURN(NodePtr operand, parse_not());
      node->children.push_back(std::move(operand));
      return node;
    }
    return parse_compare();
  }

  Result<NodePtr> parse_compare() {
    const int line = peek().line;
    LS_ASSIGN_OR_RETURN(NodePtr first, parse_math1());
    NodePtr compare;
    while (true) {
      std::string op;
      if (peek().kind == Token::Kind::Operator &&
          (peek().value == "==" || peek().value == "!=" || peek().value == "<" || peek().value == ">" ||
           peek().value == "<=" || peek().value == ">=")) {
        op = take().value;
      } else if (at_name("in")) {
        take();
        op = "in";
      } else if (at_name("not") && peek(1).kind == Token::Kind::Name && peek(1).value == "in") {
        take();
        take();
        op = "not in";
      } else {
        break;
      }
      if (!compare) {
        compare = make(NodeKind::Compare, line);
        compare->children.push_back(std::move(first));
      }
      LS_ASSIGN_OR_RETURN(NodePtr operand, parse_math1());
      compare->keywords.push_back(op);
      compare->children.push_back(std::move(operand));
    }
    return compare ? std::move(compare) : std::move(first);
  }

  // One precedence level of left-associative binary operators.
  template <typename Next>
  Result<NodePtr> parse_level(std::initializer_list<std::string_view> ops, Next next) {
    LS_ASSIGN_OR_RETURN(NodePtr left, (this->*next)());
    while (true) {
      bool matched = false;
      for (std::string_view op : ops) matched |= at_operator(op);
      if (!matched) return left;
      const Token op = take();
      LS_ASSIGN_OR_RETURN(NodePtr right, (this->*next)());
      left = binary(op.value, std::move(left), std::move(right), op.line);
    }
  }
  Result<NodePtr> parse_math1() { return parse_level({"+", "-"}, &Parser::parse_concat); }
  Result<NodePtr> parse_concat() { return parse_level({"~"}, &Parser::parse_math2); }
  Result<NodePtr> parse_math2() { return parse_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  Result<NodePtr> parse_pow() { return parse_level({"**"}, &Parser::parse_unary_filtered); }
  Result<NodePtr> parse_unary_filtered() { return parse_unary(true); }

  Result<NodePtr> parse_unary(bool with_filter) {
    NodePtr node;
    if (at_operator("-") || at_operator("+")) {
      node = make(NodeKind::Unary, peek().line);
      node->name = take().value;
      LS_ASSIGN_OR_RETURN(NodePtr operand, parse_unary(false));
      node->children.push_back(std::move(operand));
    } else {
      LS_ASSIGN_OR_RETURN(node, parse_primary());
    }
    LS_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filter) return parse_filters(std::move(node));
    return node;
  }

  Result<NodePtr> parse_primary() {
    const Token token = take();
    auto literal = [&](Value value) {
      auto node = make(NodeKind::Literal, token.line);
      node->literal = std::move(value);
      return node;
    };
    switch (token.kind) {
      case Token::Kind::Name:
        if (token.value == "true" || token.value == "True") return literal(Value::from_bool(true));
        if (token.value == "false" || token.value == "False") return literal(Value::from_bool(false));
        if (token.value == "none" || token.value == "None") return literal(Value::none());
        {
          auto node = make(NodeKind::Name, token.line);
          node->name = token.value;
          return node;
        }
      case Token::Kind::String: {
        std::string text = token.value;
        while (peek().kind == Token::Kind::String) text += take().value;
        return literal(Value::from_string(std::move(text)));
      }
      case Token::Kind::Integer: return literal(Value::from_int(std::stoll(token.value)));
      case Token::Kind::Float: return literal(Value::from_float(std::stod(token.value)));
      case Token::Kind::Operator:
        if (token.value == "(") {
          if (at_operator(")")) {
            take();
            return make(NodeKind::TupleLiteral, token.line);
          }
          LS_ASSIGN_OR_RETURN(NodePtr inner, parse_tuple(true));
          LS_RETURN_IF_ERROR(expect_operator(")"));
          return inner;
        }
        if (token.value == "[" || token.value == "{") {
          const bool is_list = token.value == "[";
          auto node = make(is_list ? NodeKind::ListLiteral : NodeKind::DictLiteral, token.line);
          const std::string_view close = is_list ? "]" : "}";
          while (!at_operator(close)) {
            LS_ASSIGN_OR_RETURN(NodePtr item, parse_expression());
            node->children.push_back(std::move(item));
            if (!is_list) {
              LS_RETURN_IF_ERROR(expect_operator(":"));
              LS_ASSIGN_OR_RETURN(NodePtr value, parse_expression());
              node->children.push_back(std::move(value));
            }
            if (!at_operator(",")) break;
            take();
          }
          LS_RETURN_IF_ERROR(expect_operator(close));
          return node;
        }
        break;
      default: break;
    }
    --position_;
    return error("unexpected '" + token.value + "'");
  }

  Result<NodePtr> parse_postfix(NodePtr node) {
    while (true) {
      if (at_operator(".")) {
        const int line = take().line;
        if (peek().kind == Token::Kind::Name) {
          auto access = make(NodeKind::GetAttr, line);
          access->name = take().value;
          access->children.push_back(std::move(node));
          node = std::move(access);
        } else if (peek().kind == Token::Kind::Integer) {
          auto access = make(NodeKind::GetItem, line);
          access->children.push_back(std::move(node));
          auto index = make(NodeKind::Literal, line);
          index->literal = Value::from_int(std::stoll(take().value));
          access->children.push_back(std::move(index));
          node = std::move(access);
        } else {
          return error("expected an attribute name after '.'");
        }
      } else if (at_operator("[")) {
        LS_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (at_operator("(")) {
        auto call = make(NodeKind::Call, peek().line);
        call->children.push_back(std::move(node));
        LS_RETURN_IF_ERROR(parse_arguments(*call));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  Result<NodePtr> parse_subscript(NodePtr target) {
    const int line = take().line;
    NodePtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!at_operator("]")) {
      if (at_operator(":")) {
        take();
        is_slice = true;
        if (++part > 2) return error("a slice has at most three parts");
        continue;
      }
      if (parts[part]) return error("expected ':' or ']' in subscript");
      LS_ASSIGN_OR_RETURN(parts[part], parse_expression());
    }
    take();
    auto node = make(is_slice ? NodeKind::Slice : NodeKind::GetItem, line);
    node->children.push_back(std::move(target));
    if (!is_slice && !parts[0]) return error("empty subscript");
    for (int index = 0; index < (is_slice ? 3 : 1); ++index) node->children.push_back(std::move(parts[index]));
    return node;
  }

  // "(a, b, key=c)" appended to `node`'s children, keyword names recorded in order.
  Status parse_arguments(Node& node) {
    LS_RETURN_IF_ERROR(expect_operator("("));
    while (!at_operator(")")) {
      if (at_operator("*") || at_operator("**")) return unsupported("'*args' call", peek().line);
      if (peek().kind == Token::Kind::Name && peek(1).kind == Token::Kind::Operator && peek(1).value == "=") {
        node.keywords.push_back(take().value);
        take();
      } else if (!node.keywords.empty()) {
        return error("positional argument after a keyword argument");
      }
      LS_ASSIGN_OR_RETURN(NodePtr argument, parse_expression());
      node.children.push_back(std::move(argument));
      if (!at_operator(",")) break;
      take();
    }
    return expect_operator(")");
  }

  Result<NodePtr> parse_filters(NodePtr node) {
    while (true) {
      if (at_operator("|")) {
        const int line = take().line;
        if (peek().kind != Token::Kind::Name) return error("expected a filter name after '|'");
        auto filter = make(NodeKind::Filter, line);
        filter->name = take().value;
        if (!kFilters.count(filter->name)) return unsupported("filter '" + filter->name + "'", line);
        filter->children.push_back(std::move(node));
        if (at_operator("(")) LS_RETURN_IF_ERROR(parse_arguments(*filter));
        node = std::move(filter);
      } else if (at_name("is")) {
        const int line = take().line;
        auto test = make(NodeKind::Test, line);
        if (at_name("not")) {
          take();
          test->negated = true;
        }
        if (peek().kind != Token::Kind::Name) return error("expected a test name after 'is'");
        test->name = take().value;
        if (!kTests.count(test->name)) return unsupported("test '" + test->name + "'", line);
        test->children.push_back(std::move(node));
        const Token& next = peek();
        if (at_operator("(")) {
          LS_RETURN_IF_ERROR(parse_arguments(*test));
        } else if ((next.kind == Token::Kind::Name && next.value != "else" && next.value != "or" && next.value != "and" &&
                    next.value != "if" && next.value != "is") ||
                   next.kind == Token::Kind::String || next.kind == Token::Kind::Integer || next.kind == Token::Kind::Float ||
                   (next.kind == Token::Kind::Operator && (next.value == "[" || next.value == "{"))) {
          LS_ASSIGN_OR_RETURN(NodePtr argument, parse_primary());
          LS_ASSIGN_OR_RETURN(argument, parse_postfix(std::move(argument)));
          test->children.push_back(std::move(argument));
        }
        node = std::move(test);
      } else if (at_operator("(")) {
        auto call = make(NodeKind::Call, peek().line);
        call->children.push_back(std::move(node));
        LS_RETURN_IF_ERROR(parse_arguments(*call));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t position_ = 0;
};

}  // namespace

Result<std::vector<NodePtr>> parse_template(std::string_view source) {
  LS_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source));
  Parser parser(std::move(tokens));
  return parser.parse_all();
}

}  // namespace ls::text::jinja
