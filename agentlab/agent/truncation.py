"""A reply cut by the output-token limit is not an answer (docs/architecture.md#the-turn-lifecycle).

A completion whose ``finish_reason`` is ``length`` stopped because it reached
``max_tokens`` — OpenAI's "incomplete: max_output_tokens". The loop treats it
by what was cut:

- a **tool call** (the endpoint's arguments, or the JSON-in-text object, no
  longer parse) goes back to the model as a malformed call — an observation,
  as other bad output does — whose error says the reply was cut and asks for
  a shorter one (``mark_truncated_calls``); calls that did come through whole
  are run as usual;
- a **final answer** (plain text, no call) ends the attempt with stop reason
  ``length``: the turn fails with that cause and can be retried with more
  tokens; the text written so far is kept as ``partial_answer``, never as the
  answer;
- under schema-constrained decoding every reply is a tool call, so a cut
  reply is always a malformed call (``schema_cut_call``), never ``length``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentlab.agent.types import Completion, ToolCall


def cut_note(max_tokens: int | None) -> str:
    """The words that say a reply was cut (``max_tokens`` ``None``: the
    provider's own limit)."""
    limit = f"the output-token limit ({max_tokens} tokens)" if max_tokens else "the output-token limit"
    return f"your reply was cut off by {limit} before it was complete"


def mark_truncated_calls(completion: Completion, *, max_tokens: int | None) -> Completion:
    """``completion`` with each malformed tool call's error saying that the
    reply was cut (only when it was: ``finish_reason == "length"``); whole
    calls are left alone."""
    if not completion.truncated or not any(c.error for c in completion.tool_calls):
        return completion
    note = cut_note(max_tokens)
    calls = tuple(
        replace(call, error=f"{note}; send a shorter call. ({call.error})") if call.error else call
        for call in completion.tool_calls
    )
    return replace(completion, tool_calls=calls)


def schema_cut_call(completion: Completion, *, step: int, max_tokens: int | None) -> Completion:
    """A schema-decoded reply that was cut before its call parsed: one
    malformed call (no name) whose error says so — the grammar admits only a
    tool call, so there is no final answer to fail with."""
    if completion.tool_calls or not completion.truncated or completion.decoding != "schema":
        return completion
    call = ToolCall(
        id=f"call_{step}_0",
        name="",
        raw_arguments=completion.text,
        error=f"{cut_note(max_tokens)}; reply with one complete, shorter JSON tool call",
    )
    return replace(completion, tool_calls=(call,))


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value: ``string``, ``number``,
    ``boolean``, ``array``, ``object`` or ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"
