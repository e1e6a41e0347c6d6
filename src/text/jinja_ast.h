// The syntax tree of a parsed Jinja chat template: expressions and statements as one node type.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace ls::text::jinja {

enum class NodeKind {
  // expressions
  Literal,      // literal
  Name,         // name
  GetAttr,      // children[0].name
  GetItem,      // children[0][children[1]]
  Slice,        // children[0][children[1]:children[2]:children[3]] (absent parts are null)
  Call,         // children[0](children[1..]); the last keywords.size() arguments are keyword arguments
  Filter,       // children[0] | name(children[1..])
  Test,         // children[0] is [not] name(children[1..])
  Unary,        // name in {"-", "+", "not"} applied to children[0]
  Binary,       // children[0] name children[1]; name in {+ - * / // % ** ~ and or}
  Compare,      // children[0] ops[i] children[i+1] ... (chained); ops in keywords
  Conditional,  // children[1] if children[0] else children[2] (else may be null)
  ListLiteral,  // [children...]
  TupleLiteral, // (children...)
  DictLiteral,  // {children[0]: children[1], ...}
  // statements
  Text,         // literal text
  Output,       // {{ children[0] }}
  If,           // if children[0]: body else else_body (elif is a nested If in else_body)
  For,          // for targets in children[0] [if children[1]]: body else else_body
  Set,          // set targets (or name.attribute when attribute is set) = children[0]
  SetBlock,     // set targets[0]: body rendered to a string
  Break,
  Continue,
  Scope,        // body rendered in place (generation blocks)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;                  // name, attribute, filter/test, operator
  std::string attribute;             // Set: ns.attribute target
  Value literal;
  bool negated = false;              // Test: "is not"
  std::vector<NodePtr> children;     // null entries allowed where noted
  std::vector<std::string> keywords; // Call/Filter/Test: keyword names of trailing arguments; Compare: operators
  std::vector<std::string> targets;  // For/Set: assigned names
  std::vector<NodePtr> body, else_body;
};

// Parses the tokens of a template into its statement list; unsupported constructs are UnsupportedChatTemplate
// naming the construct and line.
Result<std::vector<NodePtr>> parse_template(std::string_view source);

}  // namespace ls::text::jinja
