"""What the agent loop reports to its driver, step by step (``AgentLoop.run``'s
``on_report``): a completion, a tool about to run, a tool's result. Each is
reported before the loop goes on, so the driver can persist it first
(docs/architecture.md#the-driver). Re-exported by ``agentlab.agent.loop``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentlab.agent.types import Completion, ToolCall, ToolResult

__all__ = [
    "CompletionReport",
    "DivergenceReport",
    "LLMRequest",
    "OnReport",
    "Report",
    "ToolResultReport",
    "ToolStartReport",
]


@dataclass(frozen=True)
class CompletionReport:
    """A step's completion arrived (reported before its tools run). For
    providers without native tools ``completion.tool_calls`` holds the calls
    parsed from its text.

    ``request`` is the call as the provider got it (``LLMRequest``): the
    messages, the tool specs, the sampling options and the response schema;
    ``None`` from a caller that does not say."""

    step: int
    completion: Completion
    request: LLMRequest | None = None


@dataclass(frozen=True)
class LLMRequest:
    """One LLM call's arguments exactly as passed to ``LLMProvider.complete``:
    ``messages`` (OpenAI chat format: ``role``, ``content``, and
    ``tool_calls`` / ``tool_call_id`` for native tools), ``tools`` (the
    OpenAI tool specs, ``None`` when the tools are described in the system
    prompt instead), ``max_tokens`` (output-token limit, ``None``: the
    provider's), ``temperature`` (``None``: the provider's, greedy for the
    local model) and ``response_schema`` (the JSON schema a constrained model
    decodes under, ``None`` when free). What the turn page shows as "what
    the model saw" (docs/architecture.md#the-event-log)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    temperature: float | None
    response_schema: dict[str, Any] | None


@dataclass(frozen=True)
class ToolResultReport:
    """One tool call of step ``step`` produced ``result``; ``replayed``: the
    result is the recorded turn's, served by a replay, the tool not run
    (``agentlab.agent.replay``)."""

    step: int
    call: ToolCall
    result: ToolResult
    replayed: bool = False


@dataclass(frozen=True)
class ToolStartReport:
    """Tool call ``call`` of step ``step`` is about to run (reported before
    it runs, so a resume after a crash knows it may have run). ``key`` is its
    idempotency key (``ToolContext.for_call``); ``repeat``: the log shows it
    started before without a result — it runs again with the same key.
    Reported for tools that do not end the turn (those have no side effect)."""

    step: int
    call: ToolCall
    key: str | None
    repeat: bool


@dataclass(frozen=True)
class DivergenceReport:
    """A replay's new agent left the recorded path at loop step ``step``:
    the ``position``-th recorded call (1-based) was ``recorded`` (``None``:
    the recorded path had ended), the new agent asked for ``call``. Reported
    before the loop acts on the call (``agentlab.agent.replay``)."""

    step: int
    position: int
    recorded: dict[str, Any] | None
    call: ToolCall


Report = CompletionReport | ToolStartReport | ToolResultReport | DivergenceReport
OnReport = Callable[[Report], Awaitable[None]]
