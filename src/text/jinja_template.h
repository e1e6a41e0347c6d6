// A compiled Jinja chat template and its renderer: statements, expressions, loop variables and scoping as
// jinja2 renders them under transformers' settings.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace ls::text::jinja {

class Template {
 public:
  // Parses `source`; unsupported constructs are UnsupportedChatTemplate naming the construct and line.
  static Result<Template> compile(std::string_view source);
  // Renders with `variables` (plus the globals raise_exception, namespace, range, dict). A template that calls
  // raise_exception, or misuses a value, is InvalidArgument with the line; an unsupported method is
  // UnsupportedChatTemplate.
  Result<std::string> render(const Dict& variables) const;

 private:
  std::shared_ptr<const std::vector<NodePtr>> body_;  // shared: immutable after compile, copies share it
};

// Builtins (jinja_builtins.cpp), used by the renderer.
// Applies filter `name` (checked at parse time) to `input`.
Result<Value> apply_filter(const std::string& name, const Value& input, Arguments& arguments);
// Evaluates test `name` on `input`.
Result<bool> apply_test(const std::string& name, const Value& input, Arguments& arguments);
// `object.name` as jinja2 resolves it: methods of strings and dicts, then keys; Undefined when absent.
Result<Value> get_attribute(const Value& object, const std::string& name);
// `object[key]`: dict keys, list and string indexes (negative from the end); Undefined when absent.
Result<Value> get_item(const Value& object, const Value& key);
// `object[start:stop:step]` for lists and strings, Python semantics.
Result<Value> get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);
// The global functions every template sees.
Dict builtin_globals();

}  // namespace ls::text::jinja
