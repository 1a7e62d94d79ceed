"""A provider that plays back a script — the LLM edge faked for tests.

Each ``complete`` call takes the next script item: a ``Completion`` is
returned, a ``ProviderError`` raised, a callable is called with the messages
(to answer based on what the loop sent), a ``Slow(seconds, item)`` waits
first. With ``stream_chars`` the provider streams (``streaming``): a
completion's text and tool-call arguments are handed to ``on_delta`` in
pieces of that many characters, ``stream_delay`` seconds apart, before it is
returned; a ``Cut(text)`` streams ``text`` and then fails as a cut stream
does (a transient ``ProviderError``, kind ``stream_cut``). ``calls`` records a deep copy of the
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

from agentlab.agent.seeding import sampling_seed
from agentlab.agent.streaming import CompletionDelta, OnDelta
from agentlab.agent.types import Completion, Decoding, ProviderError, ToolCall, Usage


class Slow:
    """A script item answered only after ``seconds`` (cancellable), e.g. to
    cancel a run in the middle of one particular LLM call."""

    def __init__(self, seconds: float, item: Completion | ProviderError) -> None:
        self.seconds = seconds
        self.item = item


class Cut:
    """A script item that streams ``text`` and then fails as a stream cut
    mid-way does (``ProviderError(transient=True, kind="stream_cut")``);
    without streaming it just fails."""

    def __init__(self, text: str) -> None:
        self.text = text


ScriptItem = Completion | ProviderError | Slow | Cut | Callable[[list[dict[str, Any]]], Completion]


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
        stream_chars: int = 0,
        stream_delay: float = 0.0,
    ) -> None:
        self.script = list(script)
        self.streaming = stream_chars > 0
        self.stream_chars = stream_chars
        self.stream_delay = stream_delay
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
        on_delta: OnDelta | None = None,
    ) -> Completion:
        position = len(self.calls)
        self.calls.append(copy.deepcopy(messages))
        self.tools_seen.append(copy.deepcopy(tools))
        self.kwargs_seen.append(
            {
                "max_tokens": max_tokens,
                "temperature": temperature,
                "response_schema": response_schema,
                # a seeded call's seed (agentlab.agent.seeding), only when set
                **({"seed": sampling_seed()} if sampling_seed() is not None else {}),
            }
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
        if isinstance(item, Cut):
            if on_delta is not None:
                await self._stream([CompletionDelta(text=item.text)], on_delta)
            raise ProviderError("scripted: the stream was cut", transient=True, kind="stream_cut")
        if isinstance(item, ProviderError):
            raise item
        completion = item if isinstance(item, Completion) else item(copy.deepcopy(messages))
        if on_delta is not None:
            pieces = [CompletionDelta(text=completion.text or "")] + [
                CompletionDelta(call_index=i, call_name=c.name, arguments=c.raw_arguments or "")
                for i, c in enumerate(completion.tool_calls)
            ]
            await self._stream(pieces, on_delta)
        if completion.decoding is not None:
            return completion
        if completion.tool_calls:
            decoding: Decoding = "native"
        elif response_schema is not None and self.constrained_decoding:
            decoding = "schema"
        else:
            decoding = "free"
        return dataclasses.replace(completion, decoding=decoding)

    async def _stream(self, pieces: list[CompletionDelta], on_delta: OnDelta) -> None:
        """Hand ``pieces`` to ``on_delta`` cut into ``stream_chars``-character fragments."""
        size = max(1, self.stream_chars)
        for piece in pieces:
            body = piece.text or piece.arguments
            if piece.call_index is not None:  # the name comes first, alone
                on_delta(CompletionDelta(call_index=piece.call_index, call_name=piece.call_name))
            for start in range(0, len(body), size):
                fragment = body[start : start + size]
                if piece.call_index is None:
                    on_delta(CompletionDelta(text=fragment))
                else:
                    on_delta(CompletionDelta(call_index=piece.call_index, arguments=fragment))
                if self.stream_delay:
                    await asyncio.sleep(self.stream_delay)

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
