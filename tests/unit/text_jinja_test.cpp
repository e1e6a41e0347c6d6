// The Jinja subset: Python semantics of values, whitespace control under trim_blocks/lstrip_blocks, scoping,
// and one refusal per unsupported construct (UnsupportedChatTemplate naming it and its line).
#include <gtest/gtest.h>

#include <string>

#include "text/chat_template.h"
#include "text/jinja_template.h"

namespace ls::text::jinja {
namespace {

// Renders `source` with messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}].
Result<std::string> render(const std::string& source) {
  auto compiled = Template::compile(source);
  if (!compiled.ok()) return compiled.status();
  Dict variables;
  variables.set("messages", from_json(nlohmann::ordered_json::parse(
                                R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])")));
  variables.set("flag", Value::from_bool(true));
  return compiled->render(variables);
}

std::string rendered(const std::string& source) {
  auto out = render(source);
  EXPECT_TRUE(out.ok()) << source << " -> " << out.status().to_string();
  return out.ok() ? *out : "<error>";
}

TEST(TextJinja, ValuesPrintAndCombineWithPythonSemantics) {
  EXPECT_EQ(rendered("{{ 1 }} {{ 1.0 }} {{ 1e-05 }} {{ 2.5e20 }} {{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 8 }}"),
            "1 1.0 1e-05 2.5e+20 3.5 -4 2 256");
  EXPECT_EQ(rendered("{{ none }} {{ true }} {{ undefined_name }}|{{ [1, 'a', none] }} {{ {'k': \"it's\"} }}"),
            "None True |[1, 'a', None] {'k': \"it's\"}");
  EXPECT_EQ(rendered("{{ 'a' ~ 1 ~ none }} {{ 'ab' + 'cd' }} {{ [1] + [2] }} {{ 'x' * 3 }}"), "a1None abcd [1, 2] xxx");
  EXPECT_EQ(rendered("{{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ messages[-1].role }} {{ messages[5] is defined }}"),
            "é él cba assistant False");
  EXPECT_EQ(rendered("{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 'x' not in ['y'] }} {{ 0 or '' or 'z' }} {{ 1 and 0 }}"),
            "True True True z 0");
}

TEST(TextJinja, FiltersTestsAndMethodsBehaveLikeJinja2) {
  EXPECT_EQ(rendered("{{ '  a b  ' | trim }}|{{ 'xAx' | lower }}|{{ messages | length }}|{{ nothing | default('d') }}"),
            "a b|xax|2|d");
  EXPECT_EQ(rendered("{{ {'b': [1, 2.0], 'a': 'é\"\\n'} | tojson }}"), "{\"b\": [1, 2.0], \"a\": \"é\\\"\\n\"}");
  EXPECT_EQ(rendered("{{ {'b': 1, 'a': [true, none]} | tojson(indent=2, sort_keys=true) }}"),
            "{\n  \"a\": [\n    true,\n    null\n  ],\n  \"b\": 1\n}");
  EXPECT_EQ(rendered("{{ ' a,b '.strip().split(',') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'a-b'.replace('-', '+') }}"),
            "['a', 'b'] True a+b");
  EXPECT_EQ(rendered("{{ messages[0] is mapping }} {{ 3 is odd }} {{ 'x' is string }} {{ none is none }} {{ 6 is divisibleby 3 }}"),
            "True True True True True");
  EXPECT_EQ(rendered("{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}{{ messages[0].get('x', 'none') }}"),
            "role=user;content=Hi;none");
}

TEST(TextJinja, TrimBlocksAndLstripBlocksApplyToBlockTagsButNotToVariables) {
  EXPECT_EQ(rendered("{% if flag %}\nyes\n{% endif %}\nend"), "yes\nend");
  EXPECT_EQ(rendered("line\n    {% if flag %}\n  x\n    {% endif %}\n"), "line\n  x\n");
  EXPECT_EQ(rendered("{{ 'v' }}\n  {{ 'w' }}\n"), "v\n  w");
  EXPECT_EQ(rendered("a  {%- if flag -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(rendered("  {%+ if flag %}x{% endif %}"), "  x");
  EXPECT_EQ(rendered("a\n  {# comment #}\nb"), "a\nb");
  EXPECT_EQ(rendered("x {{- ' y ' -}} z"), "x y z");
}

TEST(TextJinja, ForLoopsScopeTheirAssignmentsWhileNamespacesCarryStateOut) {
  EXPECT_EQ(rendered("{% set x = 1 %}{% for m in messages %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(rendered("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"), "2");
  EXPECT_EQ(rendered("{% if flag %}{% set y = 'kept' %}{% endif %}{{ y }}"), "kept");
  EXPECT_EQ(rendered("{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "0TrueFalse2|1FalseTrue2|");
  EXPECT_EQ(rendered("{% for m in [] %}x{% else %}empty{% endfor %}{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"),
            "empty02");
  EXPECT_EQ(rendered("{% for m in messages if m.role == 'assistant' %}{{ m.content }}{{ loop.length }}{% endfor %}"), "Yo1");
  EXPECT_EQ(rendered("{% set block %} inner {{ 1 + 1 }} {% endset %}[{{ block }}]"), "[ inner 2 ]");
}

void expect_unsupported(const std::string& source, const std::string& words) {
  auto out = render(source);
  ASSERT_FALSE(out.ok()) << source;
  EXPECT_EQ(out.status().code(), ErrorCode::UnsupportedChatTemplate) << out.status().to_string();
  EXPECT_NE(out.status().message().find(words), std::string::npos) << out.status().to_string();
}

TEST(TextJinjaRefusals, EachUnsupportedConstructIsRefusedByNameWithItsLine) {
  expect_unsupported("{% macro m() %}x{% endmacro %}", "'macro' at line 1");
  expect_unsupported("\n{% call m() %}x{% endcall %}", "'call' at line 2");
  expect_unsupported("{% include 'x' %}", "'include'");
  expect_unsupported("{% extends 'x' %}", "'extends'");
  expect_unsupported("{% raw %}x{% endraw %}", "'raw'");
  expect_unsupported("{% filter upper %}x{% endfilter %}", "'filter'");
  expect_unsupported("{{ messages | map(attribute='role') }}", "filter 'map'");
  expect_unsupported("{{ messages | selectattr('role') }}", "filter 'selectattr'");
  expect_unsupported("{{ 1 is escaped }}", "test 'escaped'");
  expect_unsupported("{% for m in messages recursive %}{% endfor %}", "recursive");
  expect_unsupported("{{ f(*args) }}", "'*args'");
  expect_unsupported("{{ 'x'.format(1) }}", "string method 'format'");
  expect_unsupported("{{ strftime_now('%Y') }}", "strftime_now");
  expect_unsupported("{% if x %}", "missing 'elif' tag");
  expect_unsupported("{{ 1 + }}", "syntax error");
  expect_unsupported("{{ 'open }}", "never closed");
}

TEST(TextJinjaRefusals, RaiseExceptionAndTypeErrorsAreInvalidArgumentWithTheMessage) {
  auto raised = render("{{ raise_exception('roles must alternate') }}");
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(raised.status().message().find("roles must alternate"), std::string::npos);
  auto type_error = render("\n\n{{ 'a' + 1 }}");
  ASSERT_FALSE(type_error.ok());
  EXPECT_EQ(type_error.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(type_error.status().message().find("line 3"), std::string::npos) << type_error.status().to_string();
  auto undefined_attribute = render("{{ nothing.field }}");
  ASSERT_FALSE(undefined_attribute.ok());
  EXPECT_EQ(undefined_attribute.status().code(), ErrorCode::InvalidArgument);
}

TEST(TextChatTemplate, TextPartsAreJoinedAndOtherPartsAndBadMessagesAreRefused) {
  auto chat = ChatTemplate::compile("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ bos_token }}",
                                    {"<s>", "</s>", "", ""});
  ASSERT_TRUE(chat.ok());
  ChatRequest request;
  request.messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  auto out = chat->render(request);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "[user:a\nb]<s>");
  request.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])");
  auto image = chat->render(request);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(image.status().message().find("image_url"), std::string::npos);
  request.messages = nlohmann::ordered_json::parse(R"([{"content": "no role"}])");
  EXPECT_EQ(chat->render(request).status().code(), ErrorCode::InvalidArgument);
  auto tokenizer_without_template = Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  ASSERT_TRUE(tokenizer_without_template.ok()) << tokenizer_without_template.status().to_string();
  EXPECT_EQ(ChatTemplate::from_tokenizer(*tokenizer_without_template).status().code(), ErrorCode::UnsupportedChatTemplate);
}

}  // namespace
}  // namespace ls::text::jinja
