"""Parity of lanespark's chat templates with jinja2 under transformers' settings: the golden LFM2-style template
over a set of conversations, and small templates that exercise each supported Jinja construct."""
import copy
import json
import os

import pytest

from chat_reference import render
from text_bridge import GOLDEN_TOKENIZER, run_lines

with open(os.path.join(GOLDEN_TOKENIZER, "tokenizer_config.json"), encoding="utf-8") as handle:
    CONFIG = json.load(handle)
SPECIAL = {key: CONFIG[key] for key in ("bos_token", "eos_token", "pad_token") if key in CONFIG}

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, °C",
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Zürich", "東京"]},
                                                               "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
                               "required": ["city"]}, "strict": True, "extra": None}}
SEARCH_TOOL = {"name": "search", "parameters": {"q": {"type": "string", "default": "a \"quoted\"\tvalue\n"},
                                                 "weights": [0.1, 1e-05, 2.5e+20, -3.0, 100.0, 123456789012345.6]}}

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]},
    {"messages": [{"role": "user", "content": "Weather in Zürich?"}], "tools": [WEATHER_TOOL]},
    {"messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Search it"}],
     "tools": [WEATHER_TOOL, SEARCH_TOOL, "plain string tool"]},
    {"messages": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": "<|tool_call_start|>[get_weather(city=\"東京\")]<|tool_call_end|>"},
                  {"role": "tool", "content": "{\"temp\": 21.5}"}, {"role": "assistant", "content": "21.5 °C"}],
     "tools": [WEATHER_TOOL]},
    {"messages": [{"role": "user", "content": "  spaces \n\n and\ttabs  \r\n"}, {"role": "assistant", "content": ""}]},
    {"messages": [{"role": "user", "content": "emoji 👨‍👩‍👧 and <|im_end|> inside and {{ braces }} {% tags %}"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}]},
    {"messages": [{"role": "user", "content": None}]},
    {"messages": [{"role": "tool", "content": {"structured": [1, 2, {"k": "v"}]}}]},
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "empty system"}], "tools": []},
    {"messages": []},
]


def joined(messages):
    """Messages as lanespark hands them to the template: text parts joined with newlines."""
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message.get("content"), list):
            message["content"] = "\n".join(part["text"] for part in message["content"])
    return out


def reference_or_error(template, case, add_generation_prompt):
    try:
        return render(template, joined(case["messages"]), case.get("tools"), add_generation_prompt, SPECIAL,
                      case.get("extra"))
    except Exception as error:  # noqa: BLE001 - the C++ side must refuse the same cases
        return error


def compare(template, cases, template_in_line):
    requests = []
    for case in cases:
        for add_generation_prompt in (False, True):
            request = {"messages": case["messages"], "add_generation_prompt": add_generation_prompt}
            for key in ("tools", "extra"):
                if key in case:
                    request[key] = case[key]
            if template_in_line:
                request["template"] = template
            requests.append(request)
    answers = run_lines(GOLDEN_TOKENIZER, "chat", requests)
    for request, answer in zip(requests, answers):
        case = {key: request[key] for key in ("messages", "tools", "extra") if key in request}
        expected = reference_or_error(template, case, request["add_generation_prompt"])
        if isinstance(expected, Exception):
            assert "error" in answer, f"jinja2 raised {expected!r} but lanespark rendered for {request}"
        else:
            assert "hex" in answer, f"lanespark refused ({answer.get('error')}) what jinja2 renders for {request}"
            assert bytes.fromhex(answer["hex"]).decode("utf-8") == expected, f"render differs for {request}"


def test_golden_lfm2_template_renders_every_conversation_like_transformers():
    compare(CONFIG["chat_template"], CONVERSATIONS, template_in_line=False)


def test_unknown_role_raises_in_both_renderers():
    compare(CONFIG["chat_template"], [{"messages": [{"role": "narrator", "content": "x"}]}], template_in_line=False)


MESSAGES = [{"role": "system", "content": " sys "}, {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "<think>plan</think>Answer"}, {"role": "user", "content": "Ünïcode ✓"}]

TEMPLATES = {
    "chatml_with_default_system": """{% for message in messages %}
{% if loop.first and messages[0]['role'] != 'system' %}
<|im_start|>system
You are helpful.<|im_end|>
{% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] | trim }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}""",
    "alternation_check": """{{ bos_token }}{% if messages[0].role == 'system' %}{% set loop_messages = messages[1:] %}{% set system = messages[0].content %}{% else %}{% set loop_messages = messages %}{% set system = none %}{% endif %}
{%- for message in loop_messages -%}
  {%- if (message.role == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception('roles must alternate') }}{%- endif -%}
  {%- if loop.index0 == 0 and system is not none %}[SYS]{{ system.strip() }}[/SYS]{% endif -%}
  {{ '[' ~ message.role|upper ~ ']' ~ message.content ~ ('' if loop.last else '\\n') }}
{%- endfor %}""",
    "string_methods": """{% for m in messages %}{% set c = m.content %}{% if '</think>' in c %}{% set c = c.split('</think>')[-1].lstrip() %}{% endif %}
{{- m.role[:1] ~ ':' ~ c.replace('l', 'L') ~ '|' ~ c.startswith('He') ~ '|' ~ c.endswith(('r', '✓')) ~ '|' ~ c|length ~ '|' ~ c[::-1] ~ '|' ~ c[1:-1] }}
{% endfor %}""",
    "loop_variables": """{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }} {{ loop.previtem.role if loop.previtem is defined else '-' }}
{% else %}none{% endfor %}""",
    "whitespace_control": """  {%- for m in messages %}
    {{ m.role }}
  {%+ if m.content %}  +{{ m.content }}  {% endif -%}
    {# a comment #}
  {{- '|' -}}
  {%- endfor %}
 tail  {{- ' x ' -}}  end
""",
    "namespace_and_set_block": """{% set ns = namespace(count=0, last='') %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.role %}{% endfor %}
{% set summary %}{{ ns.count }} messages, last {{ ns.last }}{% endset %}{{ summary | trim }}|{{ ns.count * 2 // 3 }}|{{ 7 / 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 1.5e3 }}|{{ 0.1 + 0.2 }}""",
    "tojson_and_tools": """{% if tools is not none %}{% for tool in tools %}{{ tool | tojson }}
{{ tool | tojson(indent=2) }}
{{ tool | tojson(sort_keys=true) }}
{% endfor %}{% endif %}{{ messages | length }} {{ messages[0] | tojson }}""",
    "tests_and_filters": """{% for m in messages %}{{ m.missing | default('dflt') }} {{ m.content | default('x', true) }} {{ m.missing is defined }} {{ m.content is string }} {{ loop.index is even }} {{ loop.index is divisibleby 3 }} {{ m.content | first }}{{ m.content | last }} {{ m | items | list | length }} {{ m.role | capitalize }} {{ m.role | title }} {{ [m.role, 1, 2.5, none, true] }} {{ {'k': m.role} }}
{% endfor %}{{ range(3) | list }} {{ range(1, 10, 3) | join(',') }} {{ 'a,b' | replace(',', ';') }} {{ '42' | int + 1 }} {{ 'x' | float }} {{ -3 | abs }} {{ [3, 1] | reverse | list }}""",
    "dict_methods_and_break": """{% for key, value in messages[1].items() %}{{ key }}={{ value }};{% endfor %}
{% for key in messages[1] %}{{ key }},{% endfor %}
{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.get('role') }}|{{ m.get('nope', 'fallback') }}{% endfor %}
{{ messages[1].keys() | list }} {{ messages[1].values() | list }}""",
    "conditional_expressions": """{% for m in messages %}{{ 'U' if m.role == 'user' else ('A' if m.role == 'assistant' else 'S') }}{{ m.role in ['user', 'assistant'] and 'y' or 'n' }}{{ m.role not in 'system' }}{{ not m.content }}{{ 1 < loop.index <= 3 }}{% endfor %}
{% if add_generation_prompt and messages[-1].role == 'user' %}GEN{% elif add_generation_prompt %}GEN-AFTER-{{ messages[-1].role }}{% else %}NOGEN{% endif %}""",
    "generation_block": """{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}
{% endfor %}""",
    "lstrip_and_trim_edges": """{% if true %}
    indented text
    {% if messages %}
        {{ messages[0].role }}
    {% endif %}
{% endif %}
{{ 'var' }}   {% if true %}after-var{% endif %}
   {# comment on its own line #}
x
""",
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_renders_like_jinja2(name):
    cases = [{"messages": MESSAGES, "tools": [WEATHER_TOOL, SEARCH_TOOL]}, {"messages": MESSAGES[1:2]},
             {"messages": MESSAGES[1:]}]
    compare(TEMPLATES[name], cases, template_in_line=True)
