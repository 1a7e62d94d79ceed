"""LLM calls and tool calls as spans and counts: ``llm_call`` around each
request the agent core sends (``agentlab.agent.retry``, the one call path),
``tool_report`` for each report the driver's recorder persists.

Span names and attributes follow the OpenTelemetry semantic conventions for
generative AI (semantic-conventions v1.37, docs/gen-ai/gen-ai-spans.md):
an inference span is ``chat {gen_ai.request.model}`` of kind ``CLIENT``, a
tool's is ``execute_tool {gen_ai.tool.name}``; content attributes
(``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``) are set only
with ``AGENTLAB_OTEL_CAPTURE_CONTENT``. The agent core's objects are read by
their attributes (this package sits below it: docs/architecture.md#the-package-map).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeVar

from agentlab.telemetry.metrics import child, metrics
from agentlab.telemetry.spans import TurnTrace, content_json, current_trace
from agentlab.telemetry.switches import switches
from agentlab.telemetry.tracing import tracer

C = TypeVar("C")


class LLMCall:
    """One LLM request (one try) of ``provider`` in ``role`` (``agent``,
    ``review``, ``judge``): a context manager timing it, whose ``done``
    takes the completion; an exception leaving it counts as an error of
    its ``kind`` (``ProviderError.kind``, else the exception's class)."""

    __slots__ = ("messages", "options", "provider", "role", "span", "started", "trace")

    def __init__(self, provider: Any, role: str, messages: Sequence[Any], options: dict[str, Any]) -> None:
        self.provider, self.role, self.messages, self.options = provider, role, messages, options
        self.started = 0.0
        self.span: Any = None
        self.trace: TurnTrace | None = None

    def __enter__(self) -> LLMCall:
        self.started = time.perf_counter()
        trace = current_trace()
        if trace is not None and trace.span is not None:
            self.trace = trace
            self.span = _chat_span(self.provider, trace, self.messages, self.options)
        return self

    def done(self, completion: C) -> C:
        """Count ``completion`` (its latency, its tokens) and end the span; returns it."""
        c: Any = completion
        model = c.model or getattr(self.provider, "model", "") or ""
        usage = c.usage
        if switches().metrics:
            m = metrics()
            child(m.llm_duration, _provider_name(self.provider), self.role).observe(
                time.perf_counter() - self.started
            )
            if usage.input_tokens:
                child(m.tokens, model, self.role, "input").inc(usage.input_tokens)
            if usage.output_tokens:
                child(m.tokens, model, self.role, "output").inc(usage.output_tokens)
        if self.span is not None:
            attributes: dict[str, Any] = {"gen_ai.response.model": model}
            if usage.input_tokens is not None:
                attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            if usage.output_tokens is not None:
                attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            if c.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [c.finish_reason]
            if self.trace is not None and self.trace.content:
                attributes["gen_ai.output.messages"] = content_json([_output_message(c)])
            self.span.set_attributes(attributes)
            self.span.end()
            self.span = None
        return completion

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or (self.span is None and not isinstance(exc, Exception)):
            return
        if isinstance(exc, Exception):
            error = str(getattr(exc, "kind", "") or type(exc).__name__)
            if switches().metrics:
                m = metrics()
                provider = _provider_name(self.provider)
                child(m.llm_errors, provider, error).inc()
                child(m.llm_duration, provider, self.role).observe(time.perf_counter() - self.started)
            if self.span is not None:
                from opentelemetry.trace import Status, StatusCode

                self.span.set_attribute("error.type", error)
                self.span.set_status(Status(StatusCode.ERROR, str(exc)[:500]))
        if self.span is not None:
            self.span.end()
            self.span = None


def llm_call(provider: Any, messages: Sequence[Any], *, role: str = "agent", **options: Any) -> LLMCall:
    """Time and trace one request of ``provider`` with chat ``messages``
    (``options``: ``max_tokens``, ``temperature`` as sent); see ``LLMCall``."""
    return LLMCall(provider, role, messages, options)


def _provider_name(provider: Any) -> str:
    return str(getattr(provider, "name", "") or type(provider).__name__)


def _chat_span(provider: Any, trace: TurnTrace, messages: Sequence[Any], options: dict[str, Any]) -> Any:
    from opentelemetry.trace import SpanKind

    active = tracer()
    if active is None:
        return None
    model = str(getattr(provider, "model", "") or "")
    name = _provider_name(provider)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": name,
        "gen_ai.system": name,  # the attribute's name before semantic-conventions v1.37
        "gen_ai.request.model": model,
    }
    if options.get("max_tokens") is not None:
        attributes["gen_ai.request.max_tokens"] = options["max_tokens"]
    if options.get("temperature") is not None:
        attributes["gen_ai.request.temperature"] = options["temperature"]
    if trace.content:
        attributes["gen_ai.input.messages"] = content_json(list(messages))
    return active.start_span(
        f"chat {model}".strip(), context=trace.parent(), kind=SpanKind.CLIENT, attributes=attributes
    )


def _output_message(completion: Any) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if completion.text:
        parts.append({"type": "text", "content": completion.text})
    for call in completion.tool_calls:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments})
    return {"role": "assistant", "parts": parts, "finish_reason": completion.finish_reason or ""}


def attempt_begins(number: int) -> None:
    """Attempt ``number`` of the current turn begins (the driver's recorder
    for it is built); no turn being traced: nothing."""
    trace = current_trace()
    if trace is not None:
        trace.attempt(number)


def tool_report(report: Any) -> None:
    """One report of the agent loop (``agentlab.agent.reports``) as the
    recorder persists it: a tool call's start opens its ``execute_tool``
    span, its result ends it (a call reported without a start — a tool that
    ends the turn — spans from the report before) and is counted."""
    trace = current_trace()
    now = time.time_ns()
    if hasattr(report, "result"):
        _tool_result(trace, report, now)
    elif hasattr(report, "key") and trace is not None and trace.span is not None:
        trace.tools[report.call.id] = _tool_span(trace, report.call, now)
    if trace is not None:
        trace.mark = now


def _tool_span(trace: TurnTrace, call: Any, start: int) -> Any:
    active = tracer()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
    }
    if trace.content:
        attributes["gen_ai.tool.call.arguments"] = content_json(call.arguments)
    assert active is not None
    return active.start_span(
        f"execute_tool {call.name}", context=trace.parent(), attributes=attributes, start_time=start
    )


def _tool_result(trace: TurnTrace | None, report: Any, now: int) -> None:
    call, result = report.call, report.result
    if switches().metrics:
        m = metrics()
        child(m.tool_calls, call.name).inc()
        if result.is_error:
            child(m.tool_errors, call.name).inc()
    if trace is None or trace.span is None:
        return
    span = trace.tools.pop(call.id, None) or _tool_span(trace, call, trace.mark)
    if trace.content:
        span.set_attribute("gen_ai.tool.call.result", result.output)
    if result.is_error:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=now)


def events_appended(count: int) -> None:
    """``count`` events were inserted into turns' logs (counted at the insert,
    in its transaction: an append that rolls back was counted too)."""
    if switches().metrics:
        metrics().events.inc(count)


def subscribers_changed(transport: str, delta: int) -> None:
    """A stream of ``transport`` (``websocket``, ``sse``) opened (+1) or closed (-1)."""
    if switches().metrics:
        child(metrics().subscribers, transport).inc(delta)
