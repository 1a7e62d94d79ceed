"""Telemetry: OpenTelemetry traces of turns and Prometheus metrics
(docs/production.md#traces, docs/production.md#metrics).

The one place both live, below the agent core (import-linter layers, no
Django): the agent core's call path, the driver and the streams call the
hooks named here, each a few lines at its call site. Importing this package
imports neither SDK: ``opentelemetry`` is imported on the first traced turn,
``prometheus_client`` on the first count.
"""

from __future__ import annotations

from agentlab.telemetry.calls import (
    attempt_begins,
    events_appended,
    llm_call,
    subscribers_changed,
    tool_report,
)
from agentlab.telemetry.spans import TurnTrace, current_trace, turn_trace
from agentlab.telemetry.switches import switches
from agentlab.telemetry.tracing import flush_tracing, reset_tracing, tracer


def telemetry_start() -> None:
    """Set this process's telemetry up now rather than on its first turn
    (importing the SDK blocks the event loop for a few hundred ms): the
    tracer when tracing is on, the metrics when they are counted. Called at
    daphne's start, a Celery worker's and ``run_eval``'s; harmless twice."""
    from agentlab.telemetry.metrics import metrics

    tracer()
    if switches().metrics:
        metrics()


__all__ = [
    "TurnTrace",
    "attempt_begins",
    "current_trace",
    "events_appended",
    "flush_tracing",
    "llm_call",
    "reset_tracing",
    "subscribers_changed",
    "switches",
    "telemetry_start",
    "tool_report",
    "turn_trace",
]
