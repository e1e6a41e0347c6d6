// Python-compatible conversions of Jinja values: truth, str, repr, json.dumps, comparisons.
#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "text/utf8.h"

namespace ls::text::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [name, value] : items)
    if (name == key) return &value;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [name, existing] : items)
    if (name == key) {
      existing = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* Arguments::keyword(std::string_view name) const {
  for (const auto& [key, value] : keywords)
    if (key == name) return &value;
  return nullptr;
}

Value Value::from_list(List items) {
  Value value;
  value.kind = Kind::List;
  value.list = std::make_shared<List>(std::move(items));
  return value;
}

Value Value::from_dict(Dict mapping) {
  Value value;
  value.kind = Kind::Dict;
  value.dict = std::make_shared<Dict>(std::move(mapping));
  return value;
}

Value Value::from_function(Function function) {
  Value value;
  value.kind = Kind::Function;
  value.function = std::make_shared<Function>(std::move(function));
  return value;
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::from_bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::from_int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::from_int(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value::from_float(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::from_string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::from_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict mapping;
      for (const auto& [key, item] : json.items()) mapping.items.emplace_back(key, from_json(item));
      return Value::from_dict(std::move(mapping));
    }
    default: return Value();
  }
}

bool truthy(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined: case Value::Kind::None: return false;
    case Value::Kind::Bool: return value.boolean;
    case Value::Kind::Int: return value.integer != 0;
    case Value::Kind::Float: return value.floating != 0;
    case Value::Kind::String: return !value.string.empty();
    case Value::Kind::List: return !value.list->empty();
    case Value::Kind::Dict: return value.is_namespace || !value.dict->items.empty();
    case Value::Kind::Function: return true;
  }
  return false;
}

std::string float_repr(double number) {
  if (std::isnan(number)) return "nan";
  if (std::isinf(number)) return number > 0 ? "inf" : "-inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), number, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);  // "-1.2345e+16"
  const bool negative = scientific[0] == '-';
  if (negative) scientific.erase(0, 1);
  const size_t e = scientific.find('e');
  std::string digits = scientific.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(scientific.substr(e + 1));
  const int point = exponent + 1;  // value = 0.digits x 10^point
  std::string out = negative ? "-" : "";
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out += digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int shown = point - 1;
  out += shown < 0 ? "e-" : "e+";
  const std::string magnitude = std::to_string(std::abs(shown));
  out += (magnitude.size() < 2 ? "0" : "") + magnitude;
  return out;
}

std::string to_repr(const Value& value) {
  if (value.kind != Value::Kind::String) {
    return to_str(value);
  }
  const std::string& text = value.string;
  const bool double_quotes = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (char character : text) {
    const auto byte = static_cast<unsigned char>(character);
    if (character == quote || character == '\\') {
      out += '\\';
      out += character;
    } else if (character == '\n') {
      out += "\\n";
    } else if (character == '\r') {
      out += "\\r";
    } else if (character == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7F) {
      static const char* digits = "0123456789abcdef";
      out += "\\x";
      out += digits[byte >> 4];
      out += digits[byte & 15];
    } else {
      out += character;
    }
  }
  out += quote;
  return out;
}

std::string to_str(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return value.boolean ? "True" : "False";
    case Value::Kind::Int: return std::to_string(value.integer);
    case Value::Kind::Float: return float_repr(value.floating);
    case Value::Kind::String: return value.string;
    case Value::Kind::List: {
      std::string out = "[";
      for (size_t index = 0; index < value.list->size(); ++index)
        out += (index ? ", " : "") + to_repr((*value.list)[index]);
      return out + "]";
    }
    case Value::Kind::Dict: {
      if (value.is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.dict->items) {
        out += (first ? "" : ", ") + to_repr(Value::from_string(key)) + ": " + to_repr(item);
        first = false;
      }
      return out + "}";
    }
    case Value::Kind::Function: return "<function>";
  }
  return "";
}

namespace {

void json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char character : text) {
    const auto byte = static_cast<unsigned char>(character);
    switch (character) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (byte < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", byte);
          out += buffer;
        } else {
          out += character;
        }
    }
  }
  out += '"';
}

Status json_value(std::string& out, const Value& value, std::optional<int> indent, bool sort_keys, int depth) {
  const std::string item_separator = indent ? "," : ", ";
  auto newline = [&](int level) {
    if (indent) out += "\n" + std::string(static_cast<size_t>(*indent) * level, ' ');
  };
  switch (value.kind) {
    case Value::Kind::None: out += "null"; return ok_status();
    case Value::Kind::Bool: out += value.boolean ? "true" : "false"; return ok_status();
    case Value::Kind::Int: out += std::to_string(value.integer); return ok_status();
    case Value::Kind::Float:
      if (std::isnan(value.floating)) out += "NaN";
      else if (std::isinf(value.floating)) out += value.floating > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(value.floating);
      return ok_status();
    case Value::Kind::String: json_string(out, value.string); return ok_status();
    case Value::Kind::List: {
      if (value.list->empty()) {
        out += "[]";
        return ok_status();
      }
      out += '[';
      for (size_t index = 0; index < value.list->size(); ++index) {
        if (index) out += item_separator;
        newline(depth + 1);
        LS_RETURN_IF_ERROR(json_value(out, (*value.list)[index], indent, sort_keys, depth + 1));
      }
      newline(depth);
      out += ']';
      return ok_status();
    }
    case Value::Kind::Dict: {
      if (value.is_namespace) break;
      if (value.dict->items.empty()) {
        out += "{}";
        return ok_status();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.dict->items) entries.push_back(&entry);
      if (sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* left, auto* right) { return left->first < right->first; });
      out += '{';
      for (size_t index = 0; index < entries.size(); ++index) {
        if (index) out += item_separator;
        newline(depth + 1);
        json_string(out, entries[index]->first);
        out += ": ";
        LS_RETURN_IF_ERROR(json_value(out, entries[index]->second, indent, sort_keys, depth + 1));
      }
      newline(depth);
      out += '}';
      return ok_status();
    }
    default: break;
  }
  return Status(ErrorCode::InvalidArgument, "tojson: a " + std::string(type_name(value)) + " is not JSON serializable");
}

}  // namespace

Result<std::string> to_json(const Value& value, std::optional<int> indent, bool sort_keys) {
  std::string out;
  LS_RETURN_IF_ERROR(json_value(out, value, indent, sort_keys, 0));
  return out;
}

bool equals(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (left.kind != Value::Kind::Float && right.kind != Value::Kind::Float)
      return (left.kind == Value::Kind::Bool ? left.boolean : left.integer) ==
             (right.kind == Value::Kind::Bool ? right.boolean : right.integer);
    return left.as_double() == right.as_double();
  }
  if (left.kind != right.kind) return false;
  switch (left.kind) {
    case Value::Kind::Undefined: case Value::Kind::None: return true;
    case Value::Kind::String: return left.string == right.string;
    case Value::Kind::List:
      if (left.list->size() != right.list->size()) return false;
      for (size_t index = 0; index < left.list->size(); ++index)
        if (!equals((*left.list)[index], (*right.list)[index])) return false;
      return true;
    case Value::Kind::Dict:
      if (left.dict == right.dict) return true;
      if (left.is_namespace || right.is_namespace || left.dict->items.size() != right.dict->items.size()) return false;
      for (const auto& [key, item] : left.dict->items) {
        const Value* other = right.dict->find(key);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    case Value::Kind::Function: return left.function == right.function;
    default: return false;
  }
}

Result<bool> less_than(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (left.kind == Value::Kind::Int && right.kind == Value::Kind::Int) return left.integer < right.integer;
    return left.as_double() < right.as_double();
  }
  if (left.kind == Value::Kind::String && right.kind == Value::Kind::String) return left.string < right.string;
  return Status(ErrorCode::InvalidArgument, "'<' is not supported between a " + std::string(type_name(left)) +
                                                " and a " + std::string(type_name(right)));
}

std::string_view type_name(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "none";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "string";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return value.is_namespace ? "namespace" : "dict";
    case Value::Kind::Function: return "function";
  }
  return "value";
}

}  // namespace ls::text::jinja
