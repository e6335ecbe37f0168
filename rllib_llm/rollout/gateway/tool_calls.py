"""The model's tool-call syntax into OpenAI `tool_calls`, and back into text for the template.

Two formats are read:
- Hermes/Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number per
  message, the text before the first call being the message's content;
- the embedded tool model's (`models/tool_transcripts.py`): `<NAME>ARGUMENT</NAME>` at the end of
  the message, for a tool NAME of the request, whose one string parameter receives ARGUMENT
  (`{"code": "print(47*83)"}` for a `python` tool with a `code` parameter).
A call that does not parse (bad JSON, no name, a tool the request did not offer) leaves the text
as plain content, and `ParsedMessage.malformed` counts it.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ParsedMessage:
    """An assistant message: its content, its tool calls (OpenAI's form), malformed calls."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The function names of a request's `tools`."""
    return [str(t.get("function", {}).get("name")) for t in tools or ()
            if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)]


def embedded_stop_strings(tools: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """`</NAME>` per tool: where the embedded format's call ends (the engine stops there)."""
    return [f"</{name}>" for name in tool_names(tools)]


def parse_tool_calls(text: str, tools: Sequence[Mapping[str, Any]] | None) -> ParsedMessage:
    """Split a completion's text into content and tool calls (module docstring); without
    `tools` the text is content."""
    names = tool_names(tools)
    if not names:
        return ParsedMessage(text)
    if "<tool_call>" in text:
        return _parse_hermes(text, set(names))
    return _parse_embedded(text, tools or ())


def _parse_hermes(text: str, names: set[str]) -> ParsedMessage:
    """Every `<tool_call>` block, or (one unparsable, or an opened block never closed) the text
    as content with one malformed call counted."""
    matches = list(_HERMES.finditer(text))
    calls = []
    for match in matches:
        try:
            body = json.loads(match.group(1))
            name, arguments = body["name"], body.get("arguments", {})
        except (ValueError, KeyError, TypeError):
            return ParsedMessage(text, malformed=1)
        if name not in names or not isinstance(arguments, dict):
            return ParsedMessage(text, malformed=1)
        calls.append(_openai_call(name, arguments))
    if not calls:
        return ParsedMessage(text, malformed=1)
    return ParsedMessage(text[:text.index("<tool_call>")].strip(), calls)


def _parse_embedded(text: str, tools: Sequence[Mapping[str, Any]]) -> ParsedMessage:
    for tool in tools:
        function = tool.get("function", {})
        name = function.get("name")
        close = f"</{name}>"
        if not text.endswith(close):
            continue
        start = text.rfind(f"<{name}>")
        parameter = _single_string_parameter(function.get("parameters") or {})
        if start < 0 or parameter is None:
            return ParsedMessage(text, malformed=1)
        argument = text[start + len(name) + 2:-len(close)]
        return ParsedMessage(text[:start], [_openai_call(name, {parameter: argument})])
    return ParsedMessage(text)


def _single_string_parameter(schema: Mapping[str, Any]) -> str | None:
    properties = schema.get("properties") or {}
    strings = [k for k, v in properties.items() if isinstance(v, Mapping)
               and v.get("type") == "string"]
    return strings[0] if len(strings) == 1 else None


def _openai_call(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{secrets.token_hex(8)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def embedded_call_text(call: Mapping[str, Any]) -> str:
    """A tool call written back in the embedded format, `<NAME>ARGUMENT</NAME>` (the argument
    being the call's one string value), for templates-less rendering."""
    function = call.get("function", {})
    name = function.get("name", "")
    arguments = template_arguments(function.get("arguments"))
    values = [v for v in arguments.values() if isinstance(v, str)] if isinstance(
        arguments, dict) else []
    return f"<{name}>{values[0] if len(values) == 1 else json.dumps(arguments)}</{name}>"


def template_arguments(arguments: Any) -> Any:
    """OpenAI sends arguments as a JSON string; chat templates (Qwen's) expect a mapping."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments
