"""The sweep: turns whose driver is gone are marked interrupted, lost hand-overs redone.

Run by Celery beat (``turns.jobs.tasks.turns_sweep``), the inline executor, at
server start and by ``manage.py sweep_turns``. Each candidate is re-checked
under its row lock, so sweeping from several processes at once is safe.
(healthchecks ``sendalerts``: select candidates, then act under a lock.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from turns.jobs.ids import local_job_is_gone
from turns.models import Turn, TurnKind, TurnStatus
from turns.services import enqueue
from turns.services.turns import turn_interrupt

logger = logging.getLogger(__name__)


def turns_sweep_stale(*, stale_s: float, turn_ids: Collection[int] | None = None) -> int:
    """Mark running or waiting turns whose heartbeat is older than ``stale_s``
    seconds (or missing) as interrupted, each with a ``turn.interrupted`` event
    (only among ``turn_ids`` when given: ``run_eval --celery`` sweeps its run's).

    Each candidate is re-checked under its row lock before it is marked, so a
    driver that wrote a heartbeat after the first read is left alone. Safe to
    run from several processes at once. Returns how many turns were marked.
    (healthchecks ``sendalerts``: select candidates, then act under a lock.)
    """
    swept = (TurnStatus.RUNNING, TurnStatus.WAITING)
    cutoff = timezone.now() - timedelta(seconds=stale_s)
    stale = Q(status__in=swept) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    if turn_ids is not None:
        stale &= Q(pk__in=list(turn_ids))
    return sum(
        _interrupt_if(turn_id=turn_id, still=stale, reason=f"no heartbeat for {stale_s:g} s")
        for turn_id in list(Turn.objects.filter(stale).values_list("pk", flat=True))
    )


def _interrupt_if(*, turn_id: int, still: Q, reason: str) -> bool:
    """``turn_interrupt`` the turn if it still matches ``still`` once its row
    is locked: a candidate read earlier may have moved on since (a heartbeat
    written, a new claim). Returns whether it was marked."""
    with transaction.atomic():
        if not list(Turn.objects.select_for_update().filter(still, pk=turn_id).values_list("pk")):
            return False
        return turn_interrupt(turn_id=turn_id, reason=reason)


def turns_requeue_lost(*, older_than_s: float) -> list[int]:
    """Hand chat turns that have been ``queued`` for more than ``older_than_s``
    seconds to a job again (``turns.services.enqueue.turn_enqueue``); return their ids.

    A queued turn is lost when its hand-over was: the broker refused the
    message after the commit, or the server process that was to drive it
    inline stopped first. Nothing else would ever claim it. Handing it over
    twice is harmless — the driver's claim is conditional, so the later
    delivery does nothing — and each turn is handed over at most once per
    ``older_than_s``: the conditional ``UPDATE`` that picks it (safe with
    several sweepers at once) also moves its ``updated_at`` to now. A queued
    turn's ``updated_at`` is the time it was queued: nothing writes to it
    while it waits. Evaluation turns are left alone; ``run_eval`` drives them
    itself and resumes them on its next invocation.
    """
    now = timezone.now()
    lost = Turn.objects.filter(
        status=TurnStatus.QUEUED, kind=TurnKind.CHAT, updated_at__lt=now - timedelta(seconds=older_than_s)
    )
    requeued = []
    for turn_id in list(lost.values_list("pk", flat=True)[:REQUEUE_BATCH]):
        with transaction.atomic():
            if lost.filter(pk=turn_id).update(updated_at=now):
                enqueue.turn_enqueue(turn_id)  # after the commit
                requeued.append(turn_id)
    return requeued


#: The most lost turns one sweep hands over again (the next sweep takes more).
REQUEUE_BATCH = 500


def turns_interrupt_gone(*, job_is_gone: Callable[[str], bool]) -> int:
    """Mark running or waiting turns whose driver is known to be dead as
    interrupted now, without waiting for their heartbeat to go stale:
    ``job_is_gone(job_id)`` says so (``turns.jobs.ids.local_job_is_gone``: the
    inline executor or ``run_eval`` of a process of this machine that
    exited). Each turn is re-checked under its row lock, still held by that
    job. Returns how many were marked."""
    active = Q(status__in=(TurnStatus.RUNNING, TurnStatus.WAITING)) & ~Q(job_id="")
    return sum(
        _interrupt_if(
            turn_id=turn_id, still=active & Q(job_id=job_id), reason=f"its driver ({job_id}) is gone"
        )
        for turn_id, job_id in list(Turn.objects.filter(active).values_list("pk", "job_id"))
        if job_is_gone(job_id)
    )


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did: turns marked interrupted, turns handed over again."""

    interrupted: int
    requeued: int


def turns_sweep(*, stale_s: float) -> SweepResult:
    """The periodic sweep (Celery beat, the inline executor, server start,
    ``manage.py sweep_turns``): ``turns_interrupt_gone`` for inline drivers
    of this machine that exited, ``turns_sweep_stale`` with ``stale_s``
    seconds, then ``turns_requeue_lost`` with the same age."""
    interrupted = turns_interrupt_gone(job_is_gone=local_job_is_gone)
    interrupted += turns_sweep_stale(stale_s=stale_s)
    requeued = turns_requeue_lost(older_than_s=stale_s)
    if requeued:
        logger.warning(
            "handed %d turn(s) queued for more than %g s to a job again: %s",
            len(requeued),
            stale_s,
            requeued[:20],
        )
    return SweepResult(interrupted=interrupted, requeued=len(requeued))
