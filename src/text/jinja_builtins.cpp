// Jinja builtins chat templates use: filters, tests, string and dict methods, and the globals transformers adds.
#include <algorithm>
#include <cctype>

#include "text/jinja_lexer.h"
#include "text/jinja_template.h"
#include "text/utf8.h"

namespace ls::text::jinja {
namespace {

Status type_error(const std::string& message) { return Status(ErrorCode::InvalidArgument, "chat template error: " + message); }
Status unsupported(const std::string& what) {
  return Status(ErrorCode::UnsupportedChatTemplate, "construct " + what + " is not supported");
}

// The code point boundaries of `text` (size+1 entries), so strings index by character like Python's.
std::vector<size_t> boundaries(const std::string& text) {
  std::vector<size_t> offsets;
  for (size_t position = 0; position < text.size(); position += decode_code_point(text, position).length)
    offsets.push_back(position);
  offsets.push_back(text.size());
  return offsets;
}

const Value* argument(const Arguments& arguments, size_t index, std::string_view name) {
  if (index < arguments.positional.size()) return &arguments.positional[index];
  return arguments.keyword(name);
}

bool is_strip_char(char32_t code_point, const Value* chars) {
  if (!chars || chars->kind == Value::Kind::None) return is_python_space(code_point);
  std::string character;
  append_utf8(character, code_point);
  return chars->string.find(character) != std::string::npos;
}

// Python str.strip / lstrip / rstrip.
std::string strip(const std::string& text, const Value* chars, bool left, bool right) {
  const std::vector<size_t> offsets = boundaries(text);
  size_t begin = 0, end = offsets.size() - 1;
  while (left && begin < end && is_strip_char(decode_code_point(text, offsets[begin]).value, chars)) ++begin;
  while (right && end > begin && is_strip_char(decode_code_point(text, offsets[end - 1]).value, chars)) --end;
  return text.substr(offsets[begin], offsets[end] - offsets[begin]);
}

std::string ascii_case(std::string text, bool upper) {
  for (char& character : text)
    character = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(character)) : std::tolower(static_cast<unsigned char>(character)));
  return text;
}

std::string replace_all(const std::string& text, const std::string& old_text, const std::string& new_text, int64_t count) {
  if (old_text.empty()) return text;
  std::string out;
  size_t position = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t found = text.find(old_text, position);
    if (found == std::string::npos) break;
    out.append(text, position, found - position);
    out += new_text;
    position = found + old_text.size();
  }
  return out + text.substr(position);
}

List split(const std::string& text, const Value* separator, int64_t limit) {
  List parts;
  if (!separator || separator->kind == Value::Kind::None) {  // runs of whitespace, no empty parts
    const std::vector<size_t> offsets = boundaries(text);
    size_t index = 0;
    const size_t count = offsets.size() - 1;
    while (index < count) {
      while (index < count && is_python_space(decode_code_point(text, offsets[index]).value)) ++index;
      if (index == count) break;
      if (limit >= 0 && static_cast<int64_t>(parts.size()) == limit) {
        std::string rest = text.substr(offsets[index]);
        parts.push_back(Value::from_string(strip(rest, nullptr, false, true)));
        return parts;
      }
      const size_t start = index;
      while (index < count && !is_python_space(decode_code_point(text, offsets[index]).value)) ++index;
      parts.push_back(Value::from_string(text.substr(offsets[start], offsets[index] - offsets[start])));
    }
    return parts;
  }
  size_t position = 0;
  while (limit < 0 || static_cast<int64_t>(parts.size()) < limit) {
    const size_t found = text.find(separator->string, position);
    if (found == std::string::npos) break;
    parts.push_back(Value::from_string(text.substr(position, found - position)));
    position = found + separator->string.size();
  }
  parts.push_back(Value::from_string(text.substr(position)));
  return parts;
}

Result<Value> string_method(const std::string& text, const std::string& name, Arguments& arguments) {
  const Value* first = argument(arguments, 0, "");
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::from_string(strip(text, first, name != "rstrip", name != "lstrip"));
  if (name == "upper" || name == "lower") return Value::from_string(ascii_case(text, name == "upper"));
  if (name == "startswith" || name == "endswith") {
    if (!first) return type_error(name + "() needs an argument");
    List candidates = first->kind == Value::Kind::List ? *first->list : List{*first};
    for (const Value& candidate : candidates) {
      if (candidate.kind != Value::Kind::String) return type_error(name + "() needs strings");
      const std::string& affix = candidate.string;
      const bool hit = name == "startswith" ? text.compare(0, affix.size(), affix) == 0
                                            : text.size() >= affix.size() && text.compare(text.size() - affix.size(), affix.size(), affix) == 0;
      if (hit) return Value::from_bool(true);
    }
    return Value::from_bool(false);
  }
  if (name == "split") {
    const Value* limit = argument(arguments, 1, "maxsplit");
    return Value::from_list(split(text, first ? first : arguments.keyword("sep"), limit ? limit->integer : -1));
  }
  if (name == "replace") {
    const Value* replacement = argument(arguments, 1, "new");
    const Value* count = argument(arguments, 2, "count");
    if (!first || !replacement || first->kind != Value::Kind::String || replacement->kind != Value::Kind::String)
      return type_error("replace() needs two strings");
    return Value::from_string(replace_all(text, first->string, replacement->string, count ? count->integer : -1));
  }
  if (name == "find" || name == "count") {
    if (!first || first->kind != Value::Kind::String) return type_error(name + "() needs a string");
    if (name == "find") {
      const size_t found = text.find(first->string);
      return Value::from_int(found == std::string::npos ? -1 : static_cast<int64_t>(count_code_points(text.substr(0, found))));
    }
    int64_t count = 0;
    for (size_t position = text.find(first->string); position != std::string::npos && !first->string.empty();
         position = text.find(first->string, position + first->string.size()))
      ++count;
    return Value::from_int(count);
  }
  if (name == "join") {
    if (!first || first->kind != Value::Kind::List) return type_error("join() needs a list");
    std::string out;
    for (size_t index = 0; index < first->list->size(); ++index) out += (index ? text : "") + to_str((*first->list)[index]);
    return Value::from_string(out);
  }
  return unsupported("string method '" + name + "'");
}

Result<Value> dict_method(const Value& object, const std::string& name, Arguments& arguments) {
  if (name == "get") {
    const Value* key = argument(arguments, 0, "key");
    const Value* fallback = argument(arguments, 1, "default");
    if (!key || key->kind != Value::Kind::String) return type_error("get() needs a string key");
    const Value* found = object.dict->find(key->string);
    return found ? *found : fallback ? *fallback : Value::none();
  }
  List out;
  for (const auto& [key, value] : object.dict->items) {
    if (name == "keys") out.push_back(Value::from_string(key));
    else if (name == "values") out.push_back(value);
    else out.push_back(Value::from_list({Value::from_string(key), value}));
  }
  return Value::from_list(std::move(out));
}

bool is_dict_method(const std::string& name) { return name == "get" || name == "items" || name == "keys" || name == "values"; }
bool is_string_method(const std::string& name) {
  static const char* const kNames[] = {"strip", "lstrip", "rstrip", "upper", "lower", "startswith", "endswith", "split",
                                       "replace", "find", "count", "join", "title", "capitalize", "format", "splitlines"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

int64_t length_of(const Value& value) {
  switch (value.kind) {
    case Value::Kind::String: return static_cast<int64_t>(count_code_points(value.string));
    case Value::Kind::List: return static_cast<int64_t>(value.list->size());
    case Value::Kind::Dict: return static_cast<int64_t>(value.dict->items.size());
    default: return 0;
  }
}

}  // namespace

Result<Value> get_attribute(const Value& object, const std::string& name) {
  if (object.kind == Value::Kind::Dict && !object.is_namespace && is_dict_method(name))
    return Value::from_function([object, name](Arguments& arguments) { return dict_method(object, name, arguments); });
  if (object.kind == Value::Kind::Dict) {
    const Value* found = object.dict->find(name);
    return found ? *found : Value();
  }
  if (object.kind == Value::Kind::String && is_string_method(name)) {
    const std::string text = object.string;
    return Value::from_function([text, name](Arguments& arguments) { return string_method(text, name, arguments); });
  }
  return Value();
}

Result<Value> get_item(const Value& object, const Value& key) {
  if (object.kind == Value::Kind::Dict) {
    if (key.kind != Value::Kind::String) return Value();
    const Value* found = object.dict->find(key.string);
    return found ? *found : Value();
  }
  if ((object.kind == Value::Kind::List || object.kind == Value::Kind::String) && key.kind == Value::Kind::Int) {
    const std::vector<size_t> offsets = object.kind == Value::Kind::String ? boundaries(object.string) : std::vector<size_t>();
    const int64_t size = object.kind == Value::Kind::List ? static_cast<int64_t>(object.list->size()) : static_cast<int64_t>(offsets.size()) - 1;
    const int64_t index = key.integer < 0 ? key.integer + size : key.integer;
    if (index < 0 || index >= size) return Value();
    if (object.kind == Value::Kind::List) return (*object.list)[index];
    return Value::from_string(object.string.substr(offsets[index], offsets[index + 1] - offsets[index]));
  }
  return Value();
}

Result<Value> get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.kind != Value::Kind::List && object.kind != Value::Kind::String)
    return type_error("cannot slice a " + std::string(type_name(object)));
  const std::vector<size_t> offsets = object.kind == Value::Kind::String ? boundaries(object.string) : std::vector<size_t>();
  const int64_t size = object.kind == Value::Kind::List ? static_cast<int64_t>(object.list->size()) : static_cast<int64_t>(offsets.size()) - 1;
  const int64_t stride = step.kind == Value::Kind::Int ? step.integer : 1;
  if (stride == 0) return type_error("slice step cannot be zero");
  auto clamp = [&](const Value& bound, int64_t fallback) {
    if (bound.kind != Value::Kind::Int) return fallback;
    int64_t index = bound.integer < 0 ? bound.integer + size : bound.integer;
    return stride > 0 ? std::clamp<int64_t>(index, 0, size) : std::clamp<int64_t>(index, -1, size - 1);
  };
  const int64_t first = clamp(start, stride > 0 ? 0 : size - 1);
  const int64_t last = clamp(stop, stride > 0 ? size : -1);
  List items;
  std::string text;
  for (int64_t index = first; stride > 0 ? index < last : index > last; index += stride) {
    if (object.kind == Value::Kind::List) items.push_back((*object.list)[index]);
    else text += object.string.substr(offsets[index], offsets[index + 1] - offsets[index]);
  }
  return object.kind == Value::Kind::List ? Value::from_list(std::move(items)) : Value::from_string(std::move(text));
}

Result<Value> apply_filter(const std::string& name, const Value& input, Arguments& arguments) {
  const Value* first = argument(arguments, 0, "");
  if (name == "trim") return Value::from_string(strip(to_str(input), argument(arguments, 0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::from_int(length_of(input));
  if (name == "upper" || name == "lower") return Value::from_string(ascii_case(to_str(input), name == "upper"));
  if (name == "string") return Value::from_string(to_str(input));
  if (name == "safe") return input;
  if (name == "default" || name == "d") {
    const Value* boolean = argument(arguments, 1, "boolean");
    const bool use_default = input.is_undefined() || (boolean && truthy(*boolean) && !truthy(input));
    if (!use_default) return input;
    const Value* fallback = argument(arguments, 0, "default_value");
    return fallback ? *fallback : Value::from_string("");
  }
  if (name == "tojson") {
    if (!arguments.positional.empty()) return unsupported("positional arguments of filter 'tojson'");
    std::optional<int> indent;
    bool sort_keys = false;
    for (const auto& [key, value] : arguments.keywords) {
      if (key == "indent" && value.kind == Value::Kind::Int) indent = static_cast<int>(value.integer);
      else if (key == "sort_keys") sort_keys = truthy(value);
      else if (!(key == "indent" && value.kind == Value::Kind::None) && !(key == "ensure_ascii" && !truthy(value)))
        return unsupported("argument '" + key + "' of filter 'tojson'");
    }
    LS_ASSIGN_OR_RETURN(std::string json, to_json(input, indent, sort_keys));
    return Value::from_string(std::move(json));
  }
  if (name == "join") {
    const Value* separator = argument(arguments, 0, "d");
    if (arguments.keyword("attribute")) return unsupported("argument 'attribute' of filter 'join'");
    if (input.kind != Value::Kind::List) return type_error("join needs a list, got a " + std::string(type_name(input)));
    std::string out;
    for (size_t index = 0; index < input.list->size(); ++index)
      out += (index && separator ? to_str(*separator) : "") + to_str((*input.list)[index]);
    return Value::from_string(out);
  }
  if (name == "first" || name == "last") {
    if (input.kind == Value::Kind::List) return input.list->empty() ? Value() : name == "first" ? input.list->front() : input.list->back();
    if (input.kind == Value::Kind::String) return get_item(input, Value::from_int(name == "first" ? 0 : -1));
    return type_error(name + " needs a list or string");
  }
  if (name == "list" || name == "items" || name == "reverse") {
    List items;
    if (name == "items") {
      if (input.kind != Value::Kind::Dict) return type_error("items needs a dict");
      for (const auto& [key, value] : input.dict->items) items.push_back(Value::from_list({Value::from_string(key), value}));
      return Value::from_list(std::move(items));
    }
    if (input.kind == Value::Kind::List) items = *input.list;
    else if (input.kind == Value::Kind::Dict) for (const auto& entry : input.dict->items) items.push_back(Value::from_string(entry.first));
    else if (input.kind == Value::Kind::String) for (size_t index = 0; index < static_cast<size_t>(length_of(input)); ++index) items.push_back(*get_item(input, Value::from_int(static_cast<int64_t>(index))));
    else return type_error(name + " needs a list, dict or string");
    if (name == "reverse") {
      std::reverse(items.begin(), items.end());
      if (input.kind == Value::Kind::String) {
        std::string text;
        for (const Value& item : items) text += item.string;
        return Value::from_string(text);
      }
    }
    return Value::from_list(std::move(items));
  }
  if (name == "capitalize" || name == "title") {
    std::string text = ascii_case(to_str(input), false);
    bool start = true;
    for (char& character : text) {
      if (start && std::isalpha(static_cast<unsigned char>(character))) character = static_cast<char>(std::toupper(static_cast<unsigned char>(character)));
      start = name == "title" ? !std::isalpha(static_cast<unsigned char>(character)) : false;
    }
    return Value::from_string(text);
  }
  if (name == "replace") {
    const Value* replacement = argument(arguments, 1, "new");
    const Value* count = argument(arguments, 2, "count");
    if (!first || !replacement) return type_error("replace needs two arguments");
    return Value::from_string(replace_all(to_str(input), to_str(*first), to_str(*replacement), count ? count->integer : -1));
  }
  if (name == "int" || name == "float") {
    const Value* fallback = argument(arguments, 0, "default");
    if (input.is_number()) return name == "int" ? Value::from_int(static_cast<int64_t>(input.as_double())) : Value::from_float(input.as_double());
    if (input.kind == Value::Kind::String) {
      char* end = nullptr;
      const std::string text = strip(input.string, nullptr, true, true);
      const double number = std::strtod(text.c_str(), &end);
      if (!text.empty() && end == text.c_str() + text.size())
        return name == "int" ? Value::from_int(static_cast<int64_t>(number)) : Value::from_float(number);
    }
    if (fallback) return *fallback;
    return name == "int" ? Value::from_int(0) : Value::from_float(0.0);
  }
  if (name == "abs") {
    if (input.kind == Value::Kind::Float) return Value::from_float(std::abs(input.floating));
    if (input.kind == Value::Kind::Int) return Value::from_int(std::abs(input.integer));
    return type_error("abs needs a number");
  }
  return unsupported("filter '" + name + "'");
}

Result<bool> apply_test(const std::string& name, const Value& input, Arguments& arguments) {
  const Value* first = argument(arguments, 0, "");
  using Kind = Value::Kind;
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.kind == Kind::None;
  if (name == "string") return input.kind == Kind::String;
  if (name == "number") return input.kind == Kind::Int || input.kind == Kind::Float;
  if (name == "integer") return input.kind == Kind::Int;
  if (name == "float") return input.kind == Kind::Float;
  if (name == "boolean") return input.kind == Kind::Bool;
  if (name == "true") return input.kind == Kind::Bool && input.boolean;
  if (name == "false") return input.kind == Kind::Bool && !input.boolean;
  if (name == "mapping") return input.kind == Kind::Dict && !input.is_namespace;
  if (name == "iterable") return input.kind == Kind::List || input.kind == Kind::Dict || input.kind == Kind::String;
  if (name == "sequence") return input.kind == Kind::List || input.kind == Kind::Dict || input.kind == Kind::String;
  if (name == "callable") return input.kind == Kind::Function;
  if (name == "lower" || name == "upper") {
    const std::string text = to_str(input);
    return text == ascii_case(text, name == "upper");
  }
  if (name == "even" || name == "odd") {
    if (input.kind != Kind::Int) return type_error(name + " needs an integer");
    return (input.integer % 2 == 0) == (name == "even");
  }
  if (!first) return type_error("test '" + name + "' needs an argument");
  if (name == "divisibleby") {
    if (input.kind != Kind::Int || first->kind != Kind::Int || first->integer == 0) return type_error("divisibleby needs integers");
    return input.integer % first->integer == 0;
  }
  if (name == "eq" || name == "equalto") return equals(input, *first);
  if (name == "ne") return !equals(input, *first);
  if (name == "sameas") return input.kind == first->kind && (input.kind == Kind::None || input.kind == Kind::Bool ? equals(input, *first) : input.list == first->list && input.dict == first->dict);
  if (name == "lt") return less_than(input, *first);
  if (name == "gt") return less_than(*first, input);
  if (name == "le" || name == "ge") {
    LS_ASSIGN_OR_RETURN(bool strictly, less_than(name == "le" ? *first : input, name == "le" ? input : *first));
    return !strictly;
  }
  if (name == "in") {
    if (first->kind == Kind::String) {
      if (input.kind != Kind::String) return type_error("'in <string>' needs a string on the left");
      return first->string.find(input.string) != std::string::npos;
    }
    if (first->kind == Kind::List) {
      for (const Value& item : *first->list)
        if (equals(item, input)) return true;
      return false;
    }
    if (first->kind == Kind::Dict) return input.kind == Kind::String && first->dict->find(input.string) != nullptr;
    return type_error("'in' needs a string, list or dict on the right, got a " + std::string(type_name(*first)));
  }
  return unsupported("test '" + name + "'");
}

Dict builtin_globals() {
  Dict globals;
  globals.set("raise_exception", Value::from_function([](Arguments& arguments) -> Result<Value> {
    const std::string message = arguments.positional.empty() ? "" : to_str(arguments.positional[0]);
    return Status(ErrorCode::InvalidArgument, "chat template raised an exception: " + message);
  }));
  auto make_namespace = [](Arguments& arguments) -> Result<Value> {
    Value value = Value::from_dict(Dict{});
    value.is_namespace = true;
    for (const Value& positional : arguments.positional)
      if (positional.kind == Value::Kind::Dict)
        for (const auto& [key, item] : positional.dict->items) value.dict->set(key, item);
    for (const auto& [key, item] : arguments.keywords) value.dict->set(key, item);
    return value;
  };
  globals.set("namespace", Value::from_function(make_namespace));
  globals.set("dict", Value::from_function([](Arguments& arguments) -> Result<Value> {
    Dict mapping;
    for (const auto& [key, item] : arguments.keywords) mapping.set(key, item);
    return Value::from_dict(std::move(mapping));
  }));
  globals.set("range", Value::from_function([](Arguments& arguments) -> Result<Value> {
    std::vector<int64_t> bounds;
    for (const Value& value : arguments.positional) {
      if (value.kind != Value::Kind::Int) return type_error("range() needs integers");
      bounds.push_back(value.integer);
    }
    if (bounds.empty() || bounds.size() > 3) return type_error("range() takes 1 to 3 integers");
    const int64_t start = bounds.size() > 1 ? bounds[0] : 0, stop = bounds.size() > 1 ? bounds[1] : bounds[0];
    const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
    if (step == 0) return type_error("range() step cannot be zero");
    List items;
    for (int64_t value = start; step > 0 ? value < stop : value > stop; value += step) {
      if (items.size() > 1000000) return type_error("range() larger than a million items");
      items.push_back(Value::from_int(value));
    }
    return Value::from_list(std::move(items));
  }));
  globals.set("strftime_now", Value::from_function([](Arguments&) -> Result<Value> {
    return unsupported("function 'strftime_now' (renders the current date)");
  }));
  return globals;
}

}  // namespace ls::text::jinja
