"""The reference chat-template renderer: jinja2 configured as transformers' apply_chat_template configures it."""
import json

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlocks(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers' assistant-mask tracker tag)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(template, messages, tools=None, add_generation_prompt=False, special_tokens=None, extra=None):
    """What transformers renders for these messages: trim_blocks, lstrip_blocks, loopcontrols, its tojson."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[GenerationBlocks, loopcontrols])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    compiled = environment.from_string(template)
    return compiled.render(messages=messages, tools=tools, documents=None,
                           add_generation_prompt=add_generation_prompt, **(special_tokens or {}), **(extra or {}))
