"""Plain value types shared by providers, tools, the agent loop and the driver.

Everything here is framework-free and JSON-round-trippable through ``to_dict`` /
``from_dict`` so that the driver can persist each step as events and rebuild the
same values from the event log on resume.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentlab.agent.streaming import OnDelta

#: The agent loop's own stop reasons (docs/architecture.md#the-turn-lifecycle).
StopReason = Literal[
    "final",
    "empty_answer",
    "length",
    "max_steps",
    "asked",
    "approval_rejected",
    "approval_required",
    "cancelled",
    "timeout",
    "context_overflow",
    "provider_error",
    "error",
    # a replay (agentlab.agent.replay): ended at the divergence; a tool it may not run live
    "replay_diverged",
    "replay_unsafe",
]
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]

#: How a completion's text was decoded: ``native`` — the endpoint's own tool
#: calls (OpenAI ``tools``); ``schema`` — constrained to a JSON schema (a
#: llama.cpp grammar), so the reply is valid JSON of that schema; ``free`` —
#: unconstrained text (the JSON-in-text protocol is then parsed from it).
Decoding = Literal["native", "schema", "free"]
DECODINGS: tuple[str, ...] = Decoding.__args__  # type: ignore[attr-defined]


def as_text(value: Any) -> str:
    """Store an answer, evidence or reasoning value as text, by one rule.

    Models sometimes return these fields as lists or dicts. The rule: a string is
    kept as it is; ``None`` becomes ``""``; anything else is serialised with
    ``json.dumps(value, ensure_ascii=False)`` (so ``["a", "b"]`` is stored as
    ``'["a", "b"]'``). The seed batch runner used the same rule.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


@dataclass(frozen=True)
class Usage:
    """Token usage of one completion. ``None`` means the provider did not say —
    unknown is never reported as 0 or guessed."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    #: of ``input_tokens``, those the provider read from its prompt cache
    #: (OpenAI's ``prompt_tokens_details.cached_tokens``), charged at the
    #: cached rate; ``None`` when not reported
    cached_input_tokens: int | None = None

    @property
    def known(self) -> bool:
        return self.input_tokens is not None and self.output_tokens is not None

    def to_dict(self) -> dict[str, Any]:
        """``{"input_tokens", "output_tokens"}``, and ``"cached_input_tokens"``
        when the provider reported it."""
        data: dict[str, Any] = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.cached_input_tokens is not None:
            data["cached_input_tokens"] = self.cached_input_tokens
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(
            input_tokens=data.get("input_tokens"),
            output_tokens=data.get("output_tokens"),
            cached_input_tokens=data.get("cached_input_tokens"),
        )


@dataclass(frozen=True)
class ToolCall:
    """One tool call asked for by the model.

    ``arguments`` is the parsed JSON object. When the model sent arguments that
    are not a JSON object (truncated, or a list, …) ``arguments`` is ``{}`` and
    ``error`` says what was wrong; the loop then shows that error to the model
    as the tool's result instead of running the tool. ``raw_arguments`` keeps
    what the model sent, so the next request can echo it back verbatim.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "raw_arguments": self.raw_arguments,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            arguments=dict(data.get("arguments") or {}),
            raw_arguments=data.get("raw_arguments"),
            error=data.get("error"),
        )


@dataclass(frozen=True)
class Completion:
    """One LLM reply: text, tool calls, usage, model id and finish reason.

    ``finish_reason`` is the provider's: ``stop``, ``length`` (cut by the
    output-token limit), ``tool_calls`` … ``cost`` is in US dollars when the
    provider or a price table knows it, else ``None`` (unknown, never 0).
    ``decoding`` says how the text was decoded (``Decoding``); ``None`` in
    completions recorded before it was. ``cached``: served from the LLM-call
    cache (``agentlab.agent.providers.caching``) — no request was made, and
    ``usage`` / ``cost`` are as reported when it was first made.
    """

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    cost: float | None = None
    decoding: Decoding | None = None
    cached: bool = False

    @property
    def truncated(self) -> bool:
        """Whether the reply was cut by the output-token limit."""
        return self.finish_reason == "length"

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "model": self.model,
            "finish_reason": self.finish_reason,
            "cost": self.cost,
            "decoding": self.decoding,
            # only when true, so an uncached completion's event is what it was
            **({"cached": True} if self.cached else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Completion:
        return cls(
            text=data.get("text"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            usage=Usage.from_dict(data.get("usage")),
            model=str(data.get("model") or ""),
            finish_reason=data.get("finish_reason"),
            cost=data.get("cost"),
            decoding=data.get("decoding") if data.get("decoding") in DECODINGS else None,
            cached=bool(data.get("cached")),
        )


@dataclass(frozen=True)
class ToolResult:
    """The observation one tool call produced. ``output`` is text shown to the
    model; ``is_error`` marks a failure (bad arguments, unknown tool, the tool
    raised) — failures are data for the model, not exceptions."""

    call_id: str
    name: str
    output: str
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name, "output": self.output, "is_error": self.is_error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return cls(
            call_id=str(data["call_id"]),
            name=str(data["name"]),
            output=str(data.get("output") or ""),
            is_error=bool(data.get("is_error")),
        )


@dataclass
class Step:
    """One step of the loop: one completion and the results of the tool calls it
    asked for. ``index`` counts from 1. A step rebuilt from an event log may hold
    fewer results than calls (the process died between tools); the loop then
    runs only the missing ones."""

    index: int
    completion: Completion
    results: list[ToolResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "completion": self.completion.to_dict(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(
            index=int(data["index"]),
            completion=Completion.from_dict(data["completion"]),
            results=[ToolResult.from_dict(r) for r in data.get("results") or ()],
        )


class ProviderError(Exception):
    """An LLM call failed.

    ``transient`` errors (rate limit, 5xx, timeouts, connection drops) are
    retried with backoff in exactly one place (``agentlab.agent.retry``);
    permanent ones (bad request, auth, insufficient quota) end the turn with
    stop reason ``provider_error``. ``kind == "context_overflow"`` ends it with
    stop reason ``context_overflow``. (healthchecks ``TransportError(permanent)``.)
    """

    def __init__(self, message: str, *, transient: bool, kind: str = "error", status: int | None = None):
        super().__init__(message)
        self.transient = transient
        self.kind = kind
        self.status = status


@runtime_checkable
class LLMProvider(Protocol):
    """What the loop needs from an LLM.

    ``messages`` are OpenAI chat-format dicts; ``tools`` are OpenAI function
    tool specs (``{"type": "function", "function": {name, description,
    parameters}}``) or ``None``. ``native_tools`` says whether the provider
    passes ``tools`` to the model; when false the loop describes the tools in
    the system prompt and parses a JSON-in-text protocol instead.
    ``constrained_decoding`` says whether the provider honours
    ``response_schema`` (a JSON schema the reply's text must be a value of);
    one that does not ignores it and decodes freely. ``max_tokens`` caps the
    reply; a reply cut by it has ``finish_reason == "length"``.

    Every provider takes ``on_delta`` (``agentlab.agent.streaming.OnDelta``)
    in ``complete``; one whose ``streaming`` attribute is true then streams
    the reply and hands each fragment to ``on_delta`` as it comes, and
    returns the same ``Completion`` (one that does not ignores it). A stream
    cut mid-way raises a transient ``ProviderError``. ``agentlab.agent.retry``
    passes ``on_delta`` only to streaming providers.

    Raises ``ProviderError`` (never a raw SDK exception).
    """

    name: str
    model: str
    native_tools: bool
    constrained_decoding: bool

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        response_schema: dict[str, Any] | None = None,
        on_delta: OnDelta | None = None,
    ) -> Completion: ...

    async def aclose(self) -> None:
        """Release what the provider holds (an HTTP client, say); the
        provider is not used afterwards."""
        ...
