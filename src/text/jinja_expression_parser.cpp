// Expression parsing: literals, names, postfix access and calls, filters and tests, the operator levels.
#include <set>

#include "text/jinja_expression_parser.h"

namespace ls::text::jinja {
namespace {

const std::set<std::string, std::less<>> kFilters = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join", "last", "length",
    "list", "lower", "replace", "reverse", "safe", "string", "title", "tojson", "trim", "upper"};
const std::set<std::string, std::less<>> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float", "ge", "gt", "in",
    "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
    "string", "true", "undefined", "upper"};

}  // namespace

bool ExpressionParser::at_expression_end() const {
  const Token& token = peek();
  return token.kind == Token::Kind::VariableEnd || token.kind == Token::Kind::BlockEnd ||
         token.kind == Token::Kind::End || (token.kind == Token::Kind::Operator && (token.value == ")" || token.value == "]" || token.value == "}")) ||
         (token.kind == Token::Kind::Name && (token.value == "if" || token.value == "in"));
}

Result<NodePtr> ExpressionParser::parse_tuple(bool with_conditional) {
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

Result<NodePtr> ExpressionParser::parse_expression() {
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

NodePtr ExpressionParser::binary(std::string op, NodePtr left, NodePtr right, int line) {
  auto node = make(NodeKind::Binary, line);
  node->name = std::move(op);
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return node;
}

Result<NodePtr> ExpressionParser::parse_or() {
  LS_ASSIGN_OR_RETURN(NodePtr left, parse_and());
  while (at_name("or")) {
    const int line = take().line;
    LS_ASSIGN_OR_RETURN(NodePtr right, parse_and());
    left = binary("or", std::move(left), std::move(right), line);
  }
  return left;
}

Result<NodePtr> ExpressionParser::parse_and() {
  LS_ASSIGN_OR_RETURN(NodePtr left, parse_not());
  while (at_name("and")) {
    const int line = take().line;
    LS_ASSIGN_OR_RETURN(NodePtr right, parse_not());
    left = binary("and", std::move(left), std::move(right), line);
  }
  return left;
}

Result<NodePtr> ExpressionParser::parse_not() {
  if (at_name("not")) {
    auto node = make(NodeKind::Unary, take().line);
    node->name = "not";
    LS_ASSIGN_OR_RETURN(NodePtr operand, parse_not());
    node->children.push_back(std::move(operand));
    return node;
  }
  return parse_compare();
}

Result<NodePtr> ExpressionParser::parse_compare() {
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
Result<NodePtr> ExpressionParser::parse_level(std::initializer_list<std::string_view> ops, Level next) {
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
Result<NodePtr> ExpressionParser::parse_math1() { return parse_level({"+", "-"}, &ExpressionParser::parse_concat); }
Result<NodePtr> ExpressionParser::parse_concat() { return parse_level({"~"}, &ExpressionParser::parse_math2); }
Result<NodePtr> ExpressionParser::parse_math2() { return parse_level({"*", "/", "//", "%"}, &ExpressionParser::parse_pow); }
Result<NodePtr> ExpressionParser::parse_pow() { return parse_level({"**"}, &ExpressionParser::parse_unary_filtered); }
Result<NodePtr> ExpressionParser::parse_unary_filtered() { return parse_unary(true); }

Result<NodePtr> ExpressionParser::parse_unary(bool with_filter) {
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

Result<NodePtr> ExpressionParser::parse_primary() {
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

Result<NodePtr> ExpressionParser::parse_postfix(NodePtr node) {
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

Result<NodePtr> ExpressionParser::parse_subscript(NodePtr target) {
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
Status ExpressionParser::parse_arguments(Node& node) {
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

Result<NodePtr> ExpressionParser::parse_filters(NodePtr node) {
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

}  // namespace ls::text::jinja
