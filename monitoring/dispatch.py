"""From a finished chat turn to its online scoring job, off the turn's path
(docs/monitoring.md#off-the-turns-path).

``turns`` sends ``chat_turn_finished`` after the terminal event commits;
:func:`on_chat_turn_finished` (connected by ``MonitoringConfig.ready``) picks
the enabled evaluators whose sample holds the turn and hands each (turn,
evaluator) to a job: the Celery task ``monitoring.tasks.online_score`` with
``CELERY_BROKER_URL`` set, else a small thread pool in this process (the
embedded default, as the inline executor is for turns). Nothing is scored
in the turn's thread. The enabled evaluators are read at most once per
:data:`EVALUATORS_TTL_S` per process, so with no evaluator a turn costs a
dictionary lookup; saving or deleting an evaluator (``monitoring.sync``)
clears this process's copy.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connections

from monitoring.models import OnlineEvaluator
from monitoring.sampling import sampled

logger = logging.getLogger("monitoring")

#: How long a process trusts its list of enabled evaluators (s).
EVALUATORS_TTL_S = 10.0

_cache: tuple[float, list[tuple[int, float]]] | None = None
_cache_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def evaluators_cache_clear() -> None:
    """Forget this process's list of enabled evaluators (read again at the next turn)."""
    global _cache
    with _cache_lock:
        _cache = None


def enabled_evaluators() -> list[tuple[int, float]]:
    """``(pk, sampling_rate)`` of every enabled evaluator, cached for :data:`EVALUATORS_TTL_S`."""
    global _cache
    now = time.monotonic()
    with _cache_lock:
        if _cache is not None and now - _cache[0] < EVALUATORS_TTL_S:
            return _cache[1]
    rows = list(
        OnlineEvaluator.objects.filter(enabled=True, sampling_rate__gt=0).values_list("pk", "sampling_rate")
    )
    with _cache_lock:
        _cache = (now, rows)
    return rows


def _score_inline(turn_id: int, evaluator_id: int) -> None:
    from monitoring.scoring import online_score_turn  # the judge's modules, on first use

    try:
        online_score_turn(turn_id=turn_id, evaluator_id=evaluator_id)
    except Exception:
        logger.exception("online scoring of turn %s by evaluator #%s failed", turn_id, evaluator_id)
    finally:
        connections.close_all()  # this thread's connections: the pool idles between turns


def inline_pool() -> ThreadPoolExecutor:
    """The process's scoring pool without a broker (2 threads, started on first use)."""
    global _pool
    with _cache_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentlab-online-scoring")
        return _pool


def score_later(turn_id: int, evaluator_id: int) -> Future[None] | None:
    """Hand (turn, evaluator) to a scoring job: the Celery task with a broker
    (returns ``None``), else the inline pool (returns its future)."""
    if settings.CELERY_BROKER_URL:
        from monitoring.tasks import online_score

        online_score.delay(turn_id, evaluator_id)
        return None
    return inline_pool().submit(_score_inline, turn_id, evaluator_id)


def on_chat_turn_finished(sender: Any, *, turn_id: int, **kwargs: Any) -> None:
    """The receiver of ``turns.signals.chat_turn_finished``: enqueue the
    scoring of ``turn_id`` by each enabled evaluator that samples it (the
    filters are the job's to check; they need queries)."""
    for evaluator_id, rate in enabled_evaluators():
        if sampled(evaluator_id=evaluator_id, turn_id=turn_id, rate=rate):
            score_later(turn_id, evaluator_id)
