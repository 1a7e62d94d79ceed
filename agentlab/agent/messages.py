"""A turn's steps as the chat messages of the next LLM call.

Two shapes, by provider (docs/architecture.md#the-agent-core). Native tools: each step is an
assistant message with ``tool_calls`` followed by one ``tool`` message per
result. JSON-in-text (``agentlab.agent.protocol``): the assistant's text, then
one user message with every observation of that step; the step's tool calls
are parsed again from its text (``step_calls``), which gives the same calls
and ids every time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentlab.agent.protocol import observation_message, parse_tool_calls, system_prompt
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import Step, ToolCall


def step_calls(step: Step, *, native_tools: bool) -> list[ToolCall]:
    """The tool calls ``step`` asked for: its completion's own, or, for a
    provider without native tools whose completion carries none, the calls
    parsed from its text (``parse_tool_calls``, ids ``call_{step}_{i}``)."""
    completion = step.completion
    if completion.tool_calls or native_tools:
        return list(completion.tool_calls)
    return parse_tool_calls(completion.text, step=step.index)


def build_messages(
    question: str,
    steps: Sequence[Step],
    tools: ToolRegistry,
    *,
    native_tools: bool,
    base_prompt: str | None = None,
    compact: bool = False,
    history: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The OpenAI chat messages for the next LLM call after ``steps``:
    ``[system, …history, user question, …one or two messages per step]``.
    ``history``: the conversation's earlier turns as messages
    (``agentlab.agent.history``), given as they are.

    The system prompt (``system_prompt``: ``base_prompt`` or the default;
    ``compact`` for a constrained model) covers ``tools``, the tools offered
    in the turn. With ``native_tools``
    each call's ``arguments`` is re-serialised from the parsed object, so the
    request stays valid JSON even when the model sent broken JSON, and only
    the calls that have a result get a ``tool`` message.
    """
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": system_prompt(tools, native_tools=native_tools, base=base_prompt, compact=compact),
        },
        *(dict(message) for message in history),
        {"role": "user", "content": question},
    ]
    for step in steps:
        if native_tools:
            messages.extend(_native_step(step))
        else:
            messages.append({"role": "assistant", "content": _echo(step)})
            if step.results:
                messages.append({"role": "user", "content": observation_message(step.results)})
    return messages


#: How much of a reply that held no readable tool call is repeated back to the
#: model (characters): enough to see what went wrong, never a whole reply cut
#: at the token limit — one such reply per step overflowed a 2,048-token context.
MALFORMED_ECHO_CHARS = 300


def _echo(step: Step) -> str:
    """The assistant message of a JSON-in-text step: its reply, or — when the
    reply held a call that could not be read (no tool name) — a bounded
    excerpt of it, marked as cut."""
    text = step.completion.text or ""
    malformed = any(not call.name for call in step_calls(step, native_tools=False))
    if not malformed or len(text) <= MALFORMED_ECHO_CHARS:
        return text
    return f"{text[:MALFORMED_ECHO_CHARS]}… [{len(text) - MALFORMED_ECHO_CHARS} more characters not shown]"


def _native_step(step: Step) -> list[dict[str, Any]]:
    calls = step_calls(step, native_tools=True)
    # content is a string even beside tool calls ("" when the reply had no
    # text): the form every OpenAI-compatible server accepts (llama.cpp's
    # refuses null)
    message: dict[str, Any] = {"role": "assistant", "content": step.completion.text or ""}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in calls
        ]
    messages = [message]
    by_id = {r.call_id: r for r in step.results}
    for call in calls:
        result = by_id.get(call.id)
        if result is not None:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result.output})
    return messages
