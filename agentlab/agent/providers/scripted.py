"""A provider that plays back a script — the LLM edge faked for tests.

Each ``complete`` call takes the next script item: a ``Completion`` is
returned, a ``ProviderError`` raised, a callable is called with the messages
(to answer based on what the loop sent), a ``Slow(seconds, item)`` waits
first. ``calls`` records a deep copy of the
messages of every call, so tests can assert what the model was shown and how
many calls were made.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from agentlab.agent.types import Completion, Decoding, ProviderError, ToolCall, Usage


class Slow:
    """A script item answered only after ``seconds`` (cancellable), e.g. to
    cancel a run in the middle of one particular LLM call."""

    def __init__(self, seconds: float, item: Completion | ProviderError) -> None:
        self.seconds = seconds
        self.item = item


ScriptItem = Completion | ProviderError | Slow | Callable[[list[dict[str, Any]]], Completion]


class ScriptExhausted(AssertionError):
    """The loop asked for more completions than the script has."""


class ScriptedProvider:
    """Plays ``script`` in order; ``delay`` seconds of (cancellable) sleep
    before each answer. ``constrained_decoding`` plays a provider that
    honours ``response_schema`` (``kwargs_seen`` records each one); a played
    completion without a ``decoding`` gets the one such a provider would
    report (``native`` for tool calls, ``schema`` when a schema was given and
    honoured, else ``free``)."""

    name = "scripted"

    def __init__(
        self,
        script: Sequence[ScriptItem],
        *,
        native_tools: bool = True,
        constrained_decoding: bool = False,
        model: str = "scripted",
        delay: float = 0.0,
    ) -> None:
        self.script = list(script)
        self.native_tools = native_tools
        self.constrained_decoding = constrained_decoding
        self.model = model
        self.delay = delay
        self.calls: list[list[dict[str, Any]]] = []
        self.tools_seen: list[list[dict[str, Any]] | None] = []
        self.kwargs_seen: list[dict[str, Any]] = []

    @property
    def remaining(self) -> int:
        return len(self.script) - len(self.calls)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        response_schema: dict[str, Any] | None = None,
    ) -> Completion:
        position = len(self.calls)
        self.calls.append(copy.deepcopy(messages))
        self.tools_seen.append(copy.deepcopy(tools))
        self.kwargs_seen.append(
            {"max_tokens": max_tokens, "temperature": temperature, "response_schema": response_schema}
        )
        if position >= len(self.script):
            raise ScriptExhausted(
                f"ScriptedProvider: call {position + 1} but the script has only {len(self.script)} item(s)"
            )
        if self.delay:
            await asyncio.sleep(self.delay)
        item = self.script[position]
        if isinstance(item, Slow):
            await asyncio.sleep(item.seconds)
            item = item.item
        if isinstance(item, ProviderError):
            raise item
        completion = item if isinstance(item, Completion) else item(copy.deepcopy(messages))
        if completion.decoding is not None:
            return completion
        if completion.tool_calls:
            decoding: Decoding = "native"
        elif response_schema is not None and self.constrained_decoding:
            decoding = "schema"
        else:
            decoding = "free"
        return dataclasses.replace(completion, decoding=decoding)

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------- helpers

_ids = itertools.count(1)


def _usage(usage: Usage | tuple[int | None, int | None] | None) -> Usage:
    if usage is None:
        return Usage(10, 5)
    if isinstance(usage, Usage):
        return usage
    return Usage(*usage)


def text(
    content: str | None,
    *,
    usage: Usage | tuple[int | None, int | None] | None = None,
    model: str = "scripted",
    finish_reason: str = "stop",
    cost: float | None = None,
) -> Completion:
    """A completion with text and no tool calls (default usage 10 in / 5 out)."""
    return Completion(text=content, usage=_usage(usage), model=model, finish_reason=finish_reason, cost=cost)


def call(name: str, arguments: dict[str, Any] | None = None, *, id: str | None = None) -> ToolCall:
    """A well-formed ``ToolCall`` (``raw_arguments`` is its JSON)."""
    args = dict(arguments or {})
    return ToolCall(id=id or f"call_s{next(_ids)}", name=name, arguments=args, raw_arguments=json.dumps(args))


def tool_calls(
    *calls: ToolCall,
    content: str | None = None,
    usage: Usage | tuple[int | None, int | None] | None = None,
    model: str = "scripted",
    cost: float | None = None,
) -> Completion:
    """A completion asking for ``calls`` (native tool calling)."""
    return Completion(
        text=content,
        tool_calls=tuple(calls),
        usage=_usage(usage),
        model=model,
        finish_reason="tool_calls",
        cost=cost,
    )


def tool_call(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    id: str | None = None,
    content: str | None = None,
    usage: Usage | tuple[int | None, int | None] | None = None,
    model: str = "scripted",
    cost: float | None = None,
) -> Completion:
    """A completion asking for one tool call."""
    return tool_calls(call(name, arguments, id=id), content=content, usage=usage, model=model, cost=cost)


def final(
    answer: Any,
    evidence: Any = "",
    reasoning: Any = "",
    *,
    id: str | None = None,
    usage: Usage | tuple[int | None, int | None] | None = None,
    model: str = "scripted",
    cost: float | None = None,
) -> Completion:
    """A completion calling ``final_answer``."""
    return tool_call(
        "final_answer",
        {"answer": answer, "evidence": evidence, "reasoning": reasoning},
        id=id,
        usage=usage,
        model=model,
        cost=cost,
    )
