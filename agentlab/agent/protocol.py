"""Prompts and the JSON-in-text tool protocol.

Providers without native tool calling (``native_tools = False``, e.g. the small
in-process GGUF model) are told the tools and this protocol in the system
prompt: reply with one JSON object ``{"tool": "<name>", "arguments": {…}}``.
``parse_tool_calls`` reads such replies robustly — code fences, prose around
the JSON, several objects, arguments written inline next to ``"tool"``, a bare
``{"answer": …}`` taken as ``final_answer`` — and
turns a JSON-looking request that does not parse into a ``ToolCall`` without a
name whose ``error`` explains the problem, so the loop can show it to the
model as an observation instead of crashing.

A provider with constrained decoding (the local model) is given
``step_schema(tools)`` with each step: the JSON schema of exactly one such
object naming one of the offered tools, with that tool's own argument schema.
Decoded under it, a reply is always one well-formed call (the final answer is
the ``final_answer`` tool), so a malformed request cannot happen there.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

from agentlab.agent.tools import ToolRegistry, json_schema
from agentlab.agent.types import ToolCall, ToolResult

DEFAULT_SYSTEM_PROMPT = """\
You are a careful problem-solving agent. Answer the user's question correctly.
Work step by step and use the tools when they help.
When you know the answer, call final_answer with:
- answer: the short final answer only, e.g. just the number (no units), the option letter, \
yes/no, or a few words;
- evidence: the facts or tool results that support it;
- reasoning: a brief explanation of how the answer follows."""

#: Hints appended to the default prompt for the built-in tools that are offered
#: (``ToolRegistry.offered``: ``sql_query``'s only in turns with a database).
TOOL_HINTS = {
    "calculator": "Use the calculator for any arithmetic instead of computing in your head.",
    "search_documents": "Use search_documents to look facts up in the documents that come with the question.",
    "ask_user": "If the question cannot be answered as asked, call ask_user with one clarifying question.",
    "sql_query": "This question comes with a database: use sql_query to answer from it. "
    "Read its schema first (SELECT sql FROM sqlite_master WHERE type = 'table'), then query it, "
    "and give the query's result rows "
    'as the answer, as JSON (e.g. [["France", 4]]), or just the value when there is one.',
}

TEXT_PROTOCOL = """\
## Tools
{tools}

## How to call a tool
To call a tool, reply with exactly one JSON object and nothing else:
{{"tool": "<tool name>", "arguments": {{<arguments>}}}}
The result comes back as "Observation from <tool name>: ...". Call one tool per reply.
When you are done, reply:
{{"tool": "final_answer", "arguments": {{"answer": "<your short answer>", \
"evidence": "<the facts it rests on>", "reasoning": "<how it follows>"}}}}"""


#: The protocol as a constrained (embedded) model is told it: its grammar
#: admits only well-formed calls with valid arguments, so it is shown each
#: tool's name and purpose, not its JSON schema — a third of the prompt's
#: length, which a 135M model with a 2,048-token context reads better.
COMPACT_PROTOCOL = """\
## Tools
{tools}

Reply with one JSON object that calls one tool: {{"tool": "<tool name>", "arguments": {{...}}}}.
The result comes back as "Observation from <tool name>: ...". When you know the answer, \
call final_answer."""


def describe_tools(tools: ToolRegistry) -> str:
    """One line per tool: name, description and the JSON schema of its
    arguments (compact)."""
    lines = []
    for tool in tools:
        schema = json.dumps(json_schema(tool.parameters), ensure_ascii=False, separators=(",", ":"))
        lines.append(f"- {tool.name}: {tool.description}\n  arguments (JSON schema): {schema}")
    return "\n".join(lines)


def system_prompt(
    tools: ToolRegistry, *, native_tools: bool, base: str | None = None, compact: bool = False
) -> str:
    """The system prompt: ``base`` (default: ``DEFAULT_SYSTEM_PROMPT`` plus the
    ``TOOL_HINTS`` of the built-in tools in ``tools``), plus, for providers
    without native tool calls, the tool list and the JSON-in-text protocol —
    ``compact`` (a constrained model): names and descriptions only
    (``COMPACT_PROTOCOL``). ``tools`` are the tools offered in the turn (the
    loop passes ``ToolRegistry.offered(context)``)."""
    if base is None:
        hints = [hint for name, hint in TOOL_HINTS.items() if name in tools]
        text = "\n".join([DEFAULT_SYSTEM_PROMPT, *hints])
    else:
        text = base.rstrip()
    if native_tools or not len(tools):
        return text
    if compact:
        listed = "\n".join(f"- {tool.name}: {tool.description}" for tool in tools)
        return text + "\n\n" + COMPACT_PROTOCOL.format(tools=listed)
    return text + "\n\n" + TEXT_PROTOCOL.format(tools=describe_tools(tools))


def _inline_refs(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """``node`` with local ``{"$ref": "#/$defs/X"}`` replaced by ``X`` itself
    (pydantic puts nested models there), so that a tool's argument schema can
    sit inside another schema; a recursive model is cut to any object."""
    if isinstance(node, list):
        return [_inline_refs(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"))
        if target is None or depth >= 8:
            return {"type": "object"}
        return _inline_refs(target, defs, depth + 1)
    return {k: _inline_refs(v, defs, depth) for k, v in node.items() if k != "$defs"}


#: A number as the answer of a ``math`` example: digits with an optional sign,
#: thousands commas and decimals — what the ``numeric`` scorer reads.
NUMBER_ANSWER_PATTERN = "^-?[0-9][0-9,]*([.][0-9]+)?$"
#: Any other answer: 1 to 80 characters, not starting with ``<`` (the
#: protocol's placeholders, which a small model copies), a brace (the JSON it
#: was writing) or a space, with no quote, backslash or control character (a
#: short answer needs none, and the grammar then needs no escapes). Left
#: unbounded, a 135M model wrote a paragraph into it.
TEXT_ANSWER_PATTERN = r'^[^<"\\{}\x00-\x20][^"\\\x00-\x1F]{0,79}$'
_OPERAND = "[(]*[0-9]+([.][0-9]+)?[)]*"
#: A calculator expression of a constrained model: numbers joined by at least
#: one of ``+ - * /`` (brackets allowed, single spaces around operators).
ARITHMETIC_PATTERN = f"^{_OPERAND}( ?[-+*/] ?{_OPERAND})+$"


def answer_schema(metadata: Mapping[str, Any], *, number: bool = False) -> dict[str, Any]:
    """The JSON schema of ``final_answer``'s ``answer`` for a turn whose
    context is ``metadata``, for constrained decoding: one of the offered
    letters when it has ``choices`` (``A``, ``B``, … as many as there are
    options), a number for a ``math`` example or when ``number``
    (``NUMBER_ANSWER_PATTERN``),
    else a string of at least one character (``TEXT_ANSWER_PATTERN``) —
    never an empty answer, never a placeholder of the prompt."""
    choices = metadata.get("choices")
    if isinstance(choices, list) and 0 < len(choices) <= len(string.ascii_uppercase):
        return {"enum": list(string.ascii_uppercase[: len(choices)])}
    if number or metadata.get("task_type") == "math":
        return {"type": "string", "pattern": NUMBER_ANSWER_PATTERN}
    return {"type": "string", "pattern": TEXT_ANSWER_PATTERN}


def constrained_fields(metadata: Mapping[str, Any], *, number: bool = False) -> dict[str, dict[str, Any]]:
    """The argument schemas a constrained (embedded) model decodes under in
    place of the tools' own, by tool and argument: ``final_answer``'s
    ``answer`` (``answer_schema``; ``number``: the question is arithmetic)
    and the ``calculator``'s ``expression`` narrowed to arithmetic on numbers
    (``ARITHMETIC_PATTERN``: a 135M model wrote words and ``=`` into it)."""
    return {
        "final_answer": {"answer": answer_schema(metadata, number=number)},
        "calculator": {"expression": {"type": "string", "pattern": ARITHMETIC_PATTERN}},
    }


def step_schema(
    tools: ToolRegistry, *, fields: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The JSON schema of one reply under the JSON-in-text protocol:
    ``{"tool": <name>, "arguments": <that tool's arguments>}`` for exactly one
    of ``tools`` (``tool`` first, so the name is chosen before its arguments;
    no other keys). ``fields``: argument schemas that replace a tool's own
    (``{tool: {argument: schema}}``, ``constrained_fields``); each such
    argument is required. ``tools`` must not be empty."""
    alternatives = []
    for spec in tools.specs():
        function = spec["function"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        override = (fields or {}).get(function["name"])
        if override:
            # the overridden arguments first, in their order: decoded in that order
            rest = {k: v for k, v in parameters.get("properties", {}).items() if k not in override}
            properties = {**override, **rest}
            required = [*override, *(r for r in parameters.get("required", []) if r not in override)]
            parameters = {**parameters, "properties": properties, "required": required}
        alternatives.append(
            {
                "type": "object",
                "properties": {
                    "tool": {"const": function["name"]},
                    "arguments": _inline_refs(parameters, parameters.get("$defs") or {}),
                },
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
        )
    if not alternatives:
        raise ValueError("step_schema needs at least one tool")
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def observation_message(results: list[ToolResult]) -> str:
    """The user message that carries a step's tool results back to a model
    that uses the JSON-in-text protocol."""
    parts = []
    for result in results:
        label = f"Observation from {result.name or 'tool call'}"
        if result.is_error:
            label += " (error)"
        parts.append(f"{label}: {result.output}")
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- parsing

_FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
# A reply "looks like" a tool request when it has an object with a "tool" key
# (or "name"/"function" next to "arguments") — prose that merely contains
# braces is an answer, not a broken request.
_LOOKS_LIKE_CALL_RE = re.compile(
    r"\{\s*['\"]?(tool|tool_name|function)['\"]?\s*:|['\"]arguments['\"]\s*:", re.IGNORECASE
)
_NAME_KEYS = ("tool", "tool_name", "name", "function")
_ARG_KEYS = ("arguments", "args", "parameters", "input")

# strict=False: models write raw newlines and tabs inside JSON strings
_decoder = json.JSONDecoder(strict=False)


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in ``text``, left to right (nested objects
    are part of their parent, not found again)."""
    found: list[dict[str, Any]] = []
    pos = 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return found
        try:
            value, end = _decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        if isinstance(value, dict):
            found.append(value)
        pos = end


def _as_call(obj: dict[str, Any], call_id: str) -> ToolCall | None:
    name_key = next((k for k in _NAME_KEYS if isinstance(obj.get(k), str)), None)
    if name_key is None:
        # {"function": {"name": ..., "arguments": ...}} (OpenAI shape written as text)
        inner = obj.get("function")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            return _as_call(inner, call_id)
        if "answer" in obj:
            # {"answer": "18", "reasoning": "…"}: the final answer without the envelope.
            raw = json.dumps(obj, ensure_ascii=False)
            return ToolCall(id=call_id, name="final_answer", arguments=dict(obj), raw_arguments=raw)
        return None
    if name_key == "name" and not any(k in obj for k in _ARG_KEYS):
        return None  # {"name": "Ada"} is data, not a tool request
    name = str(obj[name_key]).strip()
    arg_key = next((k for k in _ARG_KEYS if k in obj), None)
    if arg_key is None:
        # Arguments written inline: {"tool": "calculator", "expression": "2+2"}
        arguments: Any = {k: v for k, v in obj.items() if k != name_key}
    else:
        arguments = obj[arg_key]
    raw = json.dumps(arguments, ensure_ascii=False)
    if isinstance(arguments, str):
        # Some models double-encode: "arguments": "{\"expression\": \"2+2\"}"
        try:
            decoded = json.loads(arguments)
        except json.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict):
            arguments = decoded
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCall(
            id=call_id,
            name=name,
            raw_arguments=raw,
            error=f"arguments must be a JSON object, got {type(arguments).__name__}: {raw[:200]}",
        )
    return ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw)


def parse_tool_calls(text: str | None, *, step: int) -> list[ToolCall]:
    """Tool calls written in a reply under the JSON-in-text protocol.

    Ids are ``call_{step}_{i}`` (``i`` from 0), so parsing the same text for
    the same step always gives the same calls. Returns ``[]`` when the reply
    requests no tool (it is then the final answer text). A reply that looks
    like a tool request but cannot be read gives one ``ToolCall`` with
    ``name=""`` and ``error`` saying what is wrong.
    """
    if not text or not text.strip():
        return []
    fenced = _FENCE_RE.findall(text)
    candidates = [*fenced, text] if fenced else [text]
    for candidate in candidates:
        calls: list[ToolCall] = []
        for obj in _json_objects(candidate):
            call = _as_call(obj, f"call_{step}_{len(calls)}")
            if call is not None:
                calls.append(call)
        if calls:
            return calls
    if _LOOKS_LIKE_CALL_RE.search(text):
        snippet = text.strip()
        if len(snippet) > 300:
            snippet = snippet[:300] + "…"
        return [
            ToolCall(
                id=f"call_{step}_0",
                name="",
                raw_arguments=text,
                error=(
                    "your reply looks like a tool call but is not valid JSON. Reply with exactly one JSON "
                    'object like {"tool": "calculator", "arguments": {"expression": "2 + 2"}}. '
                    f"Your reply was: {snippet}"
                ),
            )
        ]
    return []
