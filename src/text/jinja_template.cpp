// The Jinja renderer: executes statements with jinja2's scoping (for loops get their own scope, if does not)
// and evaluates expressions with Python semantics.
#include "text/jinja_template.h"

#include <cmath>
#include <unordered_map>

#include "text/utf8.h"

namespace ls::text::jinja {
namespace {

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  explicit Renderer(const Dict& variables) {
    scopes_.emplace_back();
    for (auto& [name, value] : builtin_globals().items) scopes_.back()[name] = value;
    for (const auto& [name, value] : variables.items) scopes_.back()[name] = value;
  }

  Result<Flow> execute(const std::vector<NodePtr>& body) {
    for (const NodePtr& statement : body) {
      LS_ASSIGN_OR_RETURN(Flow flow, execute_one(*statement));
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  std::string& output() { return output_; }

 private:
  Status error(const Node& node, const std::string& message) const {
    return Status(ErrorCode::InvalidArgument, "chat template error at line " + std::to_string(node.line) + ": " + message);
  }
  // Adds the line to an error that does not carry one yet.
  Status at_line(const Node& node, const Status& status) const {
    if (status.message().find(" at line ") != std::string::npos) return status;
    return Status(status.code(), status.message() + " (at line " + std::to_string(node.line) + ")");
  }

  Value lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
      if (auto found = scope->find(name); found != scope->end()) return found->second;
    return Value();
  }

  Status assign(const Node& node, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = value;
      return ok_status();
    }
    if (value.kind != Value::Kind::List || value.list->size() != targets.size())
      return error(node, "cannot unpack a " + std::string(type_name(value)) + " into " + std::to_string(targets.size()) + " names");
    for (size_t index = 0; index < targets.size(); ++index) scopes_.back()[targets[index]] = (*value.list)[index];
    return ok_status();
  }

  Result<Flow> execute_one(const Node& node) {
    switch (node.kind) {
      case NodeKind::Text: output_ += node.literal.string; return Flow::Normal;
      case NodeKind::Output: {
        LS_ASSIGN_OR_RETURN(Value value, evaluate(*node.children[0]));
        output_ += to_str(value);
        return Flow::Normal;
      }
      case NodeKind::If: {
        LS_ASSIGN_OR_RETURN(Value condition, evaluate(*node.children[0]));
        return execute(truthy(condition) ? node.body : node.else_body);
      }
      case NodeKind::For: return execute_for(node);
      case NodeKind::Set: {
        LS_ASSIGN_OR_RETURN(Value value, evaluate(*node.children[0]));
        if (node.attribute.empty()) {
          LS_RETURN_IF_ERROR(assign(node, node.targets, value));
          return Flow::Normal;
        }
        Value target = lookup(node.targets[0]);
        if (target.kind != Value::Kind::Dict || !target.is_namespace)
          return error(node, "cannot assign attribute '" + node.attribute + "' of non-namespace '" + node.targets[0] + "'");
        target.dict->set(node.attribute, value);
        return Flow::Normal;
      }
      case NodeKind::SetBlock: {
        std::string saved;
        saved.swap(output_);
        LS_ASSIGN_OR_RETURN(Flow flow, execute(node.body));
        (void)flow;
        saved.swap(output_);
        scopes_.back()[node.targets[0]] = Value::from_string(std::move(saved));
        return Flow::Normal;
      }
      case NodeKind::Break: return Flow::Break;
      case NodeKind::Continue: return Flow::Continue;
      case NodeKind::Scope: return execute(node.body);
      default: return error(node, "an expression where a statement belongs");
    }
  }

  Result<Flow> execute_for(const Node& node) {
    LS_ASSIGN_OR_RETURN(Value iterable, evaluate(*node.children[0]));
    List items;
    switch (iterable.kind) {
      case Value::Kind::Undefined: break;
      case Value::Kind::List: items = *iterable.list; break;
      case Value::Kind::Dict:
        for (const auto& [key, value] : iterable.dict->items) items.push_back(Value::from_string(key));
        break;
      case Value::Kind::String:
        for (size_t position = 0; position < iterable.string.size();) {
          const CodePoint point = decode_code_point(iterable.string, position);
          items.push_back(Value::from_string(iterable.string.substr(position, point.length)));
          position += point.length;
        }
        break;
      default: return error(node, "a " + std::string(type_name(iterable)) + " is not iterable");
    }
    scopes_.emplace_back();
    if (node.children[1]) {  // {% for x in xs if condition %} filters before looping, as jinja2 does
      List kept;
      for (const Value& item : items) {
        LS_RETURN_IF_ERROR(assign(node, node.targets, item));
        LS_ASSIGN_OR_RETURN(Value keep, evaluate(*node.children[1]));
        if (truthy(keep)) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t index = 0; index < length; ++index) {
      LS_RETURN_IF_ERROR(assign(node, node.targets, items[index]));
      Dict loop;
      loop.items = {{"index", Value::from_int(index + 1)},
                    {"index0", Value::from_int(index)},
                    {"revindex", Value::from_int(length - index)},
                    {"revindex0", Value::from_int(length - index - 1)},
                    {"first", Value::from_bool(index == 0)},
                    {"last", Value::from_bool(index == length - 1)},
                    {"length", Value::from_int(length)},
                    {"previtem", index > 0 ? items[index - 1] : Value()},
                    {"nextitem", index + 1 < length ? items[index + 1] : Value()}};
      scopes_.back()["loop"] = Value::from_dict(std::move(loop));
      LS_ASSIGN_OR_RETURN(Flow flow, execute(node.body));
      if (flow == Flow::Break) break;
    }
    scopes_.pop_back();
    if (items.empty()) {
      LS_ASSIGN_OR_RETURN(Flow flow, execute(node.else_body));
      return flow;
    }
    return Flow::Normal;
  }

  Result<Arguments> evaluate_arguments(const Node& node, size_t first) {
    Arguments arguments;
    const size_t keyword_start = node.children.size() - node.keywords.size();
    for (size_t index = first; index < node.children.size(); ++index) {
      LS_ASSIGN_OR_RETURN(Value value, evaluate(*node.children[index]));
      if (index < keyword_start) arguments.positional.push_back(std::move(value));
      else arguments.keywords.emplace_back(node.keywords[index - keyword_start], std::move(value));
    }
    return arguments;
  }

  Result<Value> evaluate(const Node& node) {
    Result<Value> value = evaluate_unchecked(node);
    if (!value.ok()) return at_line(node, value.status());
    return value;
  }

  Result<Value> evaluate_unchecked(const Node& node) {
    switch (node.kind) {
      case NodeKind::Literal: return node.literal;
      case NodeKind::Name: return lookup(node.name);
      case NodeKind::GetAttr: {
        LS_ASSIGN_OR_RETURN(Value object, evaluate(*node.children[0]));
        if (object.is_undefined()) return error(node, "cannot read attribute '" + node.name + "' of an undefined value");
        return get_attribute(object, node.name);
      }
      case NodeKind::GetItem: {
        LS_ASSIGN_OR_RETURN(Value object, evaluate(*node.children[0]));
        LS_ASSIGN_OR_RETURN(Value key, evaluate(*node.children[1]));
        if (object.is_undefined()) return error(node, "cannot index an undefined value");
        return get_item(object, key);
      }
      case NodeKind::Slice: {
        LS_ASSIGN_OR_RETURN(Value object, evaluate(*node.children[0]));
        Value bounds[3];
        for (int index = 0; index < 3; ++index)
          if (node.children[1 + index]) {
            LS_ASSIGN_OR_RETURN(bounds[index], evaluate(*node.children[1 + index]));
          } else {
            bounds[index] = Value::none();
          }
        return get_slice(object, bounds[0], bounds[1], bounds[2]);
      }
      case NodeKind::Call: {
        LS_ASSIGN_OR_RETURN(Value callee, evaluate(*node.children[0]));
        if (callee.kind != Value::Kind::Function) {
          const std::string what = node.children[0]->kind == NodeKind::Name ? "'" + node.children[0]->name + "'" : "a " + std::string(type_name(callee));
          return error(node, what + " is not callable" + (callee.is_undefined() ? " (undefined)" : ""));
        }
        LS_ASSIGN_OR_RETURN(Arguments arguments, evaluate_arguments(node, 1));
        return (*callee.function)(arguments);
      }
      case NodeKind::Filter: {
        LS_ASSIGN_OR_RETURN(Value input, evaluate(*node.children[0]));
        LS_ASSIGN_OR_RETURN(Arguments arguments, evaluate_arguments(node, 1));
        return apply_filter(node.name, input, arguments);
      }
      case NodeKind::Test: {
        LS_ASSIGN_OR_RETURN(Value input, evaluate(*node.children[0]));
        LS_ASSIGN_OR_RETURN(Arguments arguments, evaluate_arguments(node, 1));
        LS_ASSIGN_OR_RETURN(bool passed, apply_test(node.name, input, arguments));
        return Value::from_bool(passed != node.negated);
      }
      case NodeKind::Unary: {
        LS_ASSIGN_OR_RETURN(Value operand, evaluate(*node.children[0]));
        if (node.name == "not") return Value::from_bool(!truthy(operand));
        if (operand.kind == Value::Kind::Float) return Value::from_float(node.name == "-" ? -operand.floating : operand.floating);
        if (operand.kind == Value::Kind::Int || operand.kind == Value::Kind::Bool) {
          const int64_t number = operand.kind == Value::Kind::Bool ? operand.boolean : operand.integer;
          return Value::from_int(node.name == "-" ? -number : number);
        }
        return error(node, "bad operand type for unary " + node.name + ": " + std::string(type_name(operand)));
      }
      case NodeKind::Binary: return evaluate_binary(node);
      case NodeKind::Compare: {
        LS_ASSIGN_OR_RETURN(Value left, evaluate(*node.children[0]));
        for (size_t index = 0; index < node.keywords.size(); ++index) {
          LS_ASSIGN_OR_RETURN(Value right, evaluate(*node.children[index + 1]));
          LS_ASSIGN_OR_RETURN(bool holds, compare(node.keywords[index], left, right));
          if (!holds) return Value::from_bool(false);
          left = std::move(right);
        }
        return Value::from_bool(true);
      }
      case NodeKind::Conditional: {
        LS_ASSIGN_OR_RETURN(Value condition, evaluate(*node.children[0]));
        if (truthy(condition)) return evaluate(*node.children[1]);
        if (node.children[2]) return evaluate(*node.children[2]);
        return Value();
      }
      case NodeKind::ListLiteral: case NodeKind::TupleLiteral: {
        List items;
        for (const NodePtr& child : node.children) {
          LS_ASSIGN_OR_RETURN(Value item, evaluate(*child));
          items.push_back(std::move(item));
        }
        return Value::from_list(std::move(items));
      }
      case NodeKind::DictLiteral: {
        Dict mapping;
        for (size_t index = 0; index + 1 < node.children.size(); index += 2) {
          LS_ASSIGN_OR_RETURN(Value key, evaluate(*node.children[index]));
          if (key.kind != Value::Kind::String) return error(node, "dict keys must be strings here");
          LS_ASSIGN_OR_RETURN(Value item, evaluate(*node.children[index + 1]));
          mapping.set(key.string, std::move(item));
        }
        return Value::from_dict(std::move(mapping));
      }
      default: return error(node, "a statement where an expression belongs");
    }
  }

  Result<bool> compare(const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return equals(left, right);
    if (op == "!=") return !equals(left, right);
    if (op == "in" || op == "not in") {
      Arguments arguments;
      arguments.positional.push_back(right);
      LS_ASSIGN_OR_RETURN(bool contained, apply_test("in", left, arguments));
      return contained == (op == "in");
    }
    if (op == "<") return less_than(left, right);
    if (op == ">") return less_than(right, left);
    LS_ASSIGN_OR_RETURN(bool strictly, less_than(op == "<=" ? right : left, op == "<=" ? left : right));
    return !strictly;  // a <= b is not (b < a); a >= b is not (a < b)
  }

  Result<Value> evaluate_binary(const Node& node) {
    LS_ASSIGN_OR_RETURN(Value left, evaluate(*node.children[0]));
    const std::string& op = node.name;
    if (op == "and") return truthy(left) ? evaluate(*node.children[1]) : Result<Value>(left);
    if (op == "or") return truthy(left) ? Result<Value>(left) : evaluate(*node.children[1]);
    LS_ASSIGN_OR_RETURN(Value right, evaluate(*node.children[1]));
    if (op == "~") return Value::from_string(to_str(left) + to_str(right));
    if (op == "+" && left.kind == Value::Kind::String && right.kind == Value::Kind::String)
      return Value::from_string(left.string + right.string);
    if (op == "+" && left.kind == Value::Kind::List && right.kind == Value::Kind::List) {
      List joined = *left.list;
      joined.insert(joined.end(), right.list->begin(), right.list->end());
      return Value::from_list(std::move(joined));
    }
    if (op == "*" && left.kind == Value::Kind::String && right.kind == Value::Kind::Int) {
      std::string repeated;
      for (int64_t count = 0; count < right.integer; ++count) repeated += left.string;
      return Value::from_string(std::move(repeated));
    }
    if (!left.is_number() || !right.is_number())
      return error(node, "unsupported operand types for " + op + ": " + std::string(type_name(left)) + " and " +
                             std::string(type_name(right)));
    const bool integers = left.kind != Value::Kind::Float && right.kind != Value::Kind::Float;
    const int64_t a = left.kind == Value::Kind::Bool ? left.boolean : left.integer;
    const int64_t b = right.kind == Value::Kind::Bool ? right.boolean : right.integer;
    const double x = left.as_double(), y = right.as_double();
    if ((op == "/" || op == "//" || op == "%") && y == 0) return error(node, "division by zero");
    if (op == "+") return integers ? Value::from_int(a + b) : Value::from_float(x + y);
    if (op == "-") return integers ? Value::from_int(a - b) : Value::from_float(x - y);
    if (op == "*") return integers ? Value::from_int(a * b) : Value::from_float(x * y);
    if (op == "/") return Value::from_float(x / y);
    if (op == "//") {
      if (integers) return Value::from_int(a / b - ((a % b != 0) && ((a < 0) != (b < 0))));
      return Value::from_float(std::floor(x / y));
    }
    if (op == "%") {
      if (integers) return Value::from_int(((a % b) + b) % b);
      const double remainder = std::fmod(x, y);
      return Value::from_float(remainder != 0 && ((remainder < 0) != (y < 0)) ? remainder + y : remainder);
    }
    if (op == "**") {
      if (integers && b >= 0) {
        int64_t power = 1;
        for (int64_t count = 0; count < b; ++count) power *= a;
        return Value::from_int(power);
      }
      return Value::from_float(std::pow(x, y));
    }
    return error(node, "unknown operator " + op);
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string output_;
};

}  // namespace

Result<Template> Template::compile(std::string_view source) {
  LS_ASSIGN_OR_RETURN(std::vector<NodePtr> body, parse_template(source));
  Template compiled;
  compiled.body_ = std::make_shared<const std::vector<NodePtr>>(std::move(body));
  return compiled;
}

Result<std::string> Template::render(const Dict& variables) const {
  Renderer renderer(variables);
  LS_ASSIGN_OR_RETURN(Flow flow, renderer.execute(*body_));
  (void)flow;
  return std::move(renderer.output());
}

}  // namespace ls::text::jinja
