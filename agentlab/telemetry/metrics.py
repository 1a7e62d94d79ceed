"""The Prometheus metrics of turns, LLM calls, tools, events and streams,
counted through the official ``prometheus_client`` (docs/production.md#metrics).

``prometheus_client`` is imported on the first count, never at start-up. With
``PROMETHEUS_MULTIPROC_DIR`` set (before the process starts) every process
writes its values to files there and ``/metrics`` adds them up: the
library's multiprocess mode, for several daphne and Celery processes on one
machine. Durations are in seconds, as Prometheus names them (``_seconds``).
Labels take few values (a turn kind, an outcome, a provider, a model, a
tool name, a role), so no series grows with the traffic.
"""

from __future__ import annotations

import os
import threading
from typing import Any

#: histogram buckets (seconds) of a turn and of its wait in the queue
TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
#: histogram buckets (seconds) of one LLM call
LLM_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    """The process's metric objects (see the module docstring), built by
    ``metrics()``; each attribute is a ``prometheus_client`` metric."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.turns_started = Counter(
            "agentlab_turns_started", "Turns claimed by a driver, by kind (chat, evaluation)", ["kind"]
        )
        self.turns_finished = Counter(
            "agentlab_turns_finished",
            "Turns that reached a terminal event, by kind and outcome",
            ["kind", "outcome"],
        )
        self.turn_duration = Histogram(
            "agentlab_turn_duration_seconds",
            "A drive of a turn, claim to terminal event",
            ["kind"],
            buckets=TURN_BUCKETS,
        )
        self.queue_wait = Histogram(
            "agentlab_turn_queue_wait_seconds",
            "A new turn's wait from created to claimed",
            ["kind"],
            buckets=TURN_BUCKETS,
        )
        self.llm_duration = Histogram(
            "agentlab_llm_call_duration_seconds",
            "One LLM request (a try), by provider and role",
            ["provider", "role"],
            buckets=LLM_BUCKETS,
        )
        self.llm_errors = Counter(
            "agentlab_llm_call_errors",
            "LLM requests that failed, by provider and error kind",
            ["provider", "kind"],
        )
        self.tokens = Counter(
            "agentlab_llm_tokens",
            "Tokens the provider counted, by model, role and type (input, output)",
            ["model", "role", "type"],
        )
        self.tool_calls = Counter(
            "agentlab_tool_calls", "Tool calls that returned a result, by tool", ["tool"]
        )
        self.tool_errors = Counter("agentlab_tool_errors", "Tool calls whose result is an error", ["tool"])
        self.events = Counter("agentlab_events_appended", "Events inserted into turns' logs")
        self.subscribers = Gauge(
            "agentlab_stream_subscribers",
            "Open streams of a turn, by transport (websocket, sse)",
            ["transport"],
            multiprocess_mode="livesum",
        )
        self.examples = Counter(
            "agentlab_eval_examples_driven", "Evaluation turns driven to their end, by outcome", ["outcome"]
        )


_metrics: Metrics | None = None
_lock = threading.Lock()
_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, kept: ``labels`` validates and looks its
    child up under a lock on every call, a third of what a count cost."""
    key = (id(metric), values)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*(str(v) for v in values))
    return found


def metrics() -> Metrics:
    """The process's metrics, registered with ``prometheus_client``'s default
    registry on the first call."""
    global _metrics
    if _metrics is None:
        with _lock:
            if _metrics is None:
                _metrics = Metrics()
    return _metrics


def exposition(environ_dir: str | None) -> tuple[bytes, str]:
    """The text exposition of every metric and its content type: the
    multiprocess collector's sum over ``environ_dir`` (``PROMETHEUS_MULTIPROC_DIR``)
    when set, else this process's registry (with the Python process
    collectors). Metrics not counted yet are built first, so a scrape lists
    every family from the start."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    own = metrics()
    registry: Any = REGISTRY
    if environ_dir:
        registry = CollectorRegistry()
        registry.register(_EveryFamily(environ_dir, own))
    return generate_latest(registry), CONTENT_TYPE_LATEST


class _EveryFamily:
    """The multiprocess collector's families (summed over the files in the
    directory), then every family of ``Metrics`` they do not hold yet, with
    no sample — as this process's registry lists them without the directory.
    The files hold a family only once some process counted a sample of it
    (a labelled metric has no file entry before its first ``labels()``), so
    the first scrape listed 1 family of 12."""

    def __init__(self, path: str, own: Metrics) -> None:
        from prometheus_client import multiprocess

        self._summed = multiprocess.MultiProcessCollector(None, path=path)
        self._own = own

    def collect(self) -> Any:
        """``prometheus_client`` collector protocol: yields ``Metric`` families."""
        summed = list(self._summed.collect())
        yield from summed
        listed = {family.name for family in summed}
        for metric in vars(self._own).values():
            for family in metric.describe():
                if family.name not in listed:
                    yield family


def process_gone(pid: int | None = None) -> None:
    """Process ``pid`` (``None``: this one) has exited: with
    ``PROMETHEUS_MULTIPROC_DIR`` set, its files of live gauges are removed, so
    the stream subscribers it held are no longer summed (the library's
    ``mark_process_dead``). Without the directory: nothing."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid if pid is not None else os.getpid(), directory)
