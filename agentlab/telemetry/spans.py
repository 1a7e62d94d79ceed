"""A turn as a trace: the root span ``agentlab.turn``, a child span per
attempt, a ``chat`` span per LLM call and an ``execute_tool`` span per tool
call, named and attributed after the OpenTelemetry semantic conventions for
generative AI (semantic-conventions v1.37, docs/gen-ai/gen-ai-spans.md:
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` …); and the turn's Prometheus counts
(docs/production.md#traces).

The driver opens a ``TurnTrace`` when it claims a turn and ends it with the
result; it is the task's current trace (a context variable) in between, so
the agent core's LLM calls (``agentlab.telemetry.calls``) and the recorder's
tool reports find their parent without being handed it. With tracing off a
trace only counts the metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from agentlab.telemetry.metrics import child, metrics
from agentlab.telemetry.switches import switches
from agentlab.telemetry.tracing import tracer

_current: ContextVar[TurnTrace | None] = ContextVar("agentlab_turn_trace", default=None)


class ClaimedLike(Protocol):
    """What a trace reads of a claimed turn (``turns.driver.ClaimedTurn``)."""

    @property
    def id(self) -> int: ...
    @property
    def fresh(self) -> bool: ...
    @property
    def conversation_id(self) -> int | None: ...
    @property
    def created_at(self) -> Any: ...


class SubjectLike(Protocol):
    """What a trace reads of an evaluation turn's subject (``Subject``)."""

    @property
    def example(self) -> Mapping[str, Any] | None: ...
    @property
    def run_id(self) -> str | None: ...


class ResultLike(Protocol):
    """What a trace reads of a drive's result (``DriveResult``)."""

    @property
    def status(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def stop_reason(self) -> str: ...
    @property
    def error(self) -> str | None: ...


R = TypeVar("R", bound=ResultLike)


def current_trace() -> TurnTrace | None:
    """The trace of the turn this task drives, if any."""
    return _current.get()


def _seconds_since(created_at: Any) -> float | None:
    """Seconds from ``created_at`` (a datetime, or the text a raw SQLite
    cursor gives; naive means UTC) to now; ``None`` when unreadable."""
    if isinstance(created_at, str):
        try:
            created_at = datetime.fromisoformat(created_at)
        except ValueError:
            return None
    if not isinstance(created_at, datetime):
        return None
    if created_at.tzinfo is None:
        created_at = created_at.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - created_at).total_seconds())


class TurnTrace:
    """One drive of one turn: its root span (``None`` with tracing off), the
    current attempt's span, the tool spans open, and its counts.

    A drive that is cancelled (``asyncio.CancelledError``: its process is
    stopping; the sweeper marks the turn interrupted) never calls ``end``:
    its spans are not exported and it is not counted as finished."""

    def __init__(self, turn: ClaimedLike, *, kind: str, subject: SubjectLike | None) -> None:
        self.kind = kind
        self.started = time.perf_counter()
        self.mark = time.time_ns()  # when the last report arrived: a tool span starts no earlier
        self.span: Any = None
        self.attempt_span: Any = None
        self.attempt_number: int | None = None
        self.context: Any = None  # the attempt's span as a parent context, made once
        self.tools: dict[str, Any] = {}
        self.content = False
        if switches().metrics:
            m = metrics()
            child(m.turns_started, kind).inc()
            waited = _seconds_since(turn.created_at) if turn.fresh else None
            if waited is not None:
                child(m.queue_wait, kind).observe(waited)
        active = tracer()
        if active is not None:
            self.content = switches().capture_content
            self.span = active.start_span("agentlab.turn", attributes=_turn_attributes(turn, kind, subject))
        self.token: Token[TurnTrace | None] | None = _current.set(self)

    def attempt(self, number: int) -> None:
        """Attempt ``number`` begins (again: no change): its span, a child of the turn's."""
        if self.span is None or number == self.attempt_number:
            return
        self._end_attempt()
        from opentelemetry import trace

        active = tracer()
        if active is not None:
            self.attempt_span = active.start_span(
                "agentlab.attempt",
                context=trace.set_span_in_context(self.span),
                attributes={"agentlab.attempt.number": number},
            )
            self.context = trace.set_span_in_context(self.attempt_span)
        self.attempt_number = number

    def parent(self) -> Any:
        """The context a call's span is a child of: the attempt's, else the turn's."""
        if self.context is None:
            from opentelemetry import trace

            self.context = trace.set_span_in_context(self.attempt_span or self.span)
        return self.context

    def _end_attempt(self) -> None:
        for span in self.tools.values():
            span.end()
        self.tools.clear()
        if self.attempt_span is not None:
            self.attempt_span.end()
            self.attempt_span = None
        self.context = None

    def end(self, result: R) -> R:
        """The turn reached its terminal event with ``result``: count it, end
        its spans and stop being the task's current trace. Returns ``result``."""
        if switches().metrics:
            m = metrics()
            child(m.turns_finished, self.kind, result.outcome).inc()
            child(m.turn_duration, self.kind).observe(time.perf_counter() - self.started)
            if self.kind == "evaluation":
                child(m.examples, result.outcome).inc()
        if self.span is not None:
            self._end_attempt()
            self.span.set_attributes(
                {
                    "agentlab.turn.status": result.status,
                    "agentlab.turn.outcome": result.outcome,
                    "agentlab.turn.stop_reason": result.stop_reason,
                }
            )
            if result.status == "failed":
                from opentelemetry.trace import Status, StatusCode

                self.span.set_attribute("error.type", result.stop_reason)
                self.span.set_status(Status(StatusCode.ERROR, (result.error or "")[:500]))
            self.span.end()
            self.span = None
        self._leave()
        return result

    def _leave(self) -> None:
        token, self.token = self.token, None
        if token is None:
            return
        try:
            _current.reset(token)
        except ValueError:  # ended from another context than it began in
            if _current.get() is self:
                _current.set(None)


def _turn_attributes(turn: ClaimedLike, kind: str, subject: SubjectLike | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "agentlab",
        "agentlab.turn.id": turn.id,
        "agentlab.turn.kind": kind,
    }
    if turn.conversation_id is not None:
        attributes["agentlab.conversation.id"] = turn.conversation_id
        attributes["gen_ai.conversation.id"] = str(turn.conversation_id)
    if subject is not None:
        if subject.run_id:
            attributes["agentlab.run.id"] = subject.run_id
        example_id = (subject.example or {}).get("question_id")
        if example_id is not None:
            attributes["agentlab.example.id"] = str(example_id)
    return attributes


def turn_trace(turn: ClaimedLike, *, kind: str, subject: SubjectLike | None = None) -> TurnTrace:
    """Open the trace of claimed ``turn`` (``kind``: ``chat`` or
    ``evaluation``; ``subject``: an evaluation turn's run and example); end
    it with ``TurnTrace.end(result)``."""
    return TurnTrace(turn, kind=kind, subject=subject)


def content_json(value: Any) -> str:
    """``value`` as the JSON text a content attribute holds."""
    return json.dumps(value, ensure_ascii=False, default=str)
