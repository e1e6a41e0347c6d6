// Values of the Jinja subset chat templates use, with Python's semantics for truth, str(), repr() and json.dumps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace ls::text::jinja {

struct Value;
using List = std::vector<Value>;
// Insertion-ordered string-keyed mapping (Python dicts keep insertion order, and tojson must too).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};
// Positional and keyword arguments of a call.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  const Value* keyword(std::string_view name) const;
};
using Function = std::function<Result<Value>(Arguments&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  Kind kind = Kind::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0;
  std::string string;
  std::shared_ptr<List> list;          // shared: values are immutable except namespaces
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> function;
  bool is_namespace = false;           // a namespace() object: attributes may be assigned

  static Value none() { Value value; value.kind = Kind::None; return value; }
  static Value from_bool(bool flag) { Value value; value.kind = Kind::Bool; value.boolean = flag; return value; }
  static Value from_int(int64_t number) { Value value; value.kind = Kind::Int; value.integer = number; return value; }
  static Value from_float(double number) { Value value; value.kind = Kind::Float; value.floating = number; return value; }
  static Value from_string(std::string text) { Value value; value.kind = Kind::String; value.string = std::move(text); return value; }
  static Value from_list(List items);
  static Value from_dict(Dict mapping);
  static Value from_function(Function function);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? floating : kind == Kind::Bool ? boolean : static_cast<double>(integer); }
};

// A value built from request JSON (objects keep their key order).
Value from_json(const nlohmann::ordered_json& json);
// Python truthiness ("" / 0 / [] / {} / None / undefined are false).
bool truthy(const Value& value);
// Python str(): what {{ value }} prints ("" for undefined, "None", "True", "1.0", "['a']").
std::string to_str(const Value& value);
// Python repr() (strings quoted), used inside lists and dicts.
std::string to_repr(const Value& value);
// Python json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys); errors on undefined/functions.
Result<std::string> to_json(const Value& value, std::optional<int> indent = std::nullopt, bool sort_keys = false);
// Python repr of a float ("1.0", "1e-05", "1.5e+16").
std::string float_repr(double number);
// Python ==.
bool equals(const Value& left, const Value& right);
// Python <, for numbers and strings; other pairs are an error.
Result<bool> less_than(const Value& left, const Value& right);
// A short type name for error messages ("string", "list", ...).
std::string_view type_name(const Value& value);

}  // namespace ls::text::jinja
