"""Drive a run's examples in several worker processes (``run_eval --workers N``).

One Python process drives turns on one core: the driver, the ORM and the
``openai`` SDK all need the GIL, and ``bench/eval_throughput.py`` shows a
single process saturating one core well below what an endpoint can serve.
Like a Celery deployment that runs several worker processes, ``--workers``
splits the planned examples between N processes, each with its own event
loop, provider and database connections, and ``concurrency / N`` turns in
flight. Nothing else changes: every worker runs ``drive_examples`` — the
same driver, claims and prediction writes as a single-process run — so a
killed run resumes the same way.

Workers are started with ``spawn`` (a fresh interpreter: no inherited
database sockets or threads) and announce when they are ready; the driving
clock starts only when all of them are, so start-up is not counted as
driving time. The parent's effective LLM and database settings are handed to
the workers, so a run configured at run time (tests, ``--model``) drives
against the same endpoint and database.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.pricing import Price

from .runner import DatabaseOutage
from .services.plan import PlannedExample
from .worker import EvalJob, eval_worker

logger = logging.getLogger(__name__)

#: Settings a worker takes from its parent (the LLM endpoint).
_INHERITED_SETTINGS = (
    "AGENTLAB_LLM_BASE_URL",
    "AGENTLAB_LLM_API_KEY",
    "AGENTLAB_MODEL",
    "AGENTLAB_GGUF_PATH",
    "AGENTLAB_REVIEW",
    "AGENTLAB_TURN_TIMEOUT_S",
)
#: How long a worker may take to start (import Django, build its provider).
READY_TIMEOUT_S = 120.0


T = TypeVar("T")


def split(planned: Sequence[T], *, workers: int, concurrency: int) -> list[tuple[list[T], int]]:
    """Deal ``planned`` round-robin to ``workers`` workers and share
    ``concurrency`` between them (the first ``concurrency % workers`` get one
    more). Returns ``(examples, concurrency)`` per worker that has examples.
    Raises ``ValueError`` when ``workers`` is below 1 or above ``concurrency``."""
    if not 1 <= workers <= concurrency:
        raise ValueError(f"--workers must be between 1 and --concurrency ({concurrency}), got {workers}")
    shares = [concurrency // workers + (1 if i < concurrency % workers else 0) for i in range(workers)]
    return [(list(planned[i::workers]), shares[i]) for i in range(workers) if planned[i::workers]]


def drive_in_processes(
    planned: Sequence[PlannedExample],
    *,
    workers: int,
    concurrency: int,
    model: str | None,
    review: bool,
    price: Price | None = None,
    on_done: Callable[[], None] | None = None,
    extensions: RunExtensions | None = None,
    run_id: str | None = None,
    dataset: str | None = None,
) -> float:
    """Drive ``planned`` in ``workers`` processes; return the driving wall time
    in seconds (from the moment every worker is ready to the last one's end).

    ``extensions``, ``run_id``, ``dataset``: as for ``drive_examples``, handed
    to every worker. ``on_done`` is called in this process once per example whose prediction
    was stored. Raises ``RuntimeError`` when a worker fails to start or dies
    (the examples it did not finish stay planned: resume the run);
    ``KeyboardInterrupt`` stops every worker.
    """
    parts = split(planned, workers=workers, concurrency=concurrency)
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    go = context.Event()
    inherited = {name: getattr(settings, name) for name in _INHERITED_SETTINGS if hasattr(settings, name)}
    names = {alias: str(connections[alias].settings_dict["NAME"]) for alias in connections}
    processes = []
    for items, share in parts:
        job = EvalJob(
            items=tuple((p.prediction_id, p.turn_id, p.example_id, p.resumed) for p in items),
            concurrency=share,
            model=model,
            review=review,
            price=price.to_dict() if price is not None else None,
            settings=inherited,
            database_names=names,
            extensions=extensions,
            run_id=run_id,
            dataset=dataset,
        )
        process = context.Process(target=eval_worker, args=(job, messages, go), name="agentlab-eval-worker")
        process.start()
        processes.append(process)
    try:
        ready, deadline = 0, time.monotonic() + READY_TIMEOUT_S
        while ready < len(processes):
            kind, detail = _next(messages, processes, until=deadline)
            if kind == "ready":
                ready += 1
            elif kind == "error":
                raise RuntimeError(f"an evaluation worker failed to start: {detail}")
        started = time.monotonic()
        go.set()
        finished = 0
        while finished < len(processes):
            kind, detail = _next(messages, processes, until=None)
            if kind == "done" and on_done is not None:
                on_done()
            elif kind == "exit":
                finished += 1
            elif kind == "error":
                raise RuntimeError(f"an evaluation worker failed: {detail}")
            elif kind == "outage":
                raise DatabaseOutage(detail)
        wall = time.monotonic() - started
        for process in processes:
            process.join()
        return wall
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=10)


def _next(messages: Any, processes: list[Any], *, until: float | None) -> tuple[str, Any]:
    """The next worker message; raises ``RuntimeError`` when a worker died
    without saying so, or (with ``until``) when it is late."""
    while True:
        try:
            return messages.get(timeout=0.5)
        except queue.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"an evaluation worker exited with code {dead[0].exitcode}") from None
            if until is not None and time.monotonic() > until:
                raise RuntimeError(
                    f"the evaluation workers were not ready within {READY_TIMEOUT_S:.0f} s"
                ) from None
