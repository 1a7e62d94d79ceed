"""The watcher of running turns: heartbeats and the cancel flag (DESIGN.md §8).

One ``_Watch`` per database pool polls every turn driven on it: every
``CANCEL_POLL_S`` one query reads their cancel flags and claims, and every
``HEARTBEAT_S`` one update writes their heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Mapping

from django.conf import settings
from django.utils import timezone

from common.db import DatabaseThreads

from ..models import Turn, TurnStatus

logger = logging.getLogger(__name__)

#: How often the driver looks at the cancel flag while a turn runs, and polls
#: a pending approval (seconds). Read at call time (``watch.CANCEL_POLL_S``),
#: so a test may shorten it.
CANCEL_POLL_S = 0.5


def _poll(*, holders: Mapping[int, str], beat: bool) -> dict[int, tuple[bool, bool]]:
    """For each watched turn (``turn id → claim token``): ``(cancel flag,
    still held)``. With ``beat``, first write the heartbeat of every turn
    still held. Two statements for any number of turns."""
    active = Turn.objects.filter(pk__in=list(holders), status__in=(TurnStatus.RUNNING, TurnStatus.WAITING))
    if beat:
        # a claim token belongs to one claim of one turn: job_id IN (ours)
        # matches exactly the turns still held by their watcher
        active.filter(job_id__in=list(holders.values())).update(heartbeat_at=timezone.now())
    found = {
        pk: (bool(flag), job_id == holders[pk])
        for pk, job_id, flag in active.values_list("pk", "job_id", "cancel_requested")
    }
    return {turn_id: found.get(turn_id, (False, False)) for turn_id in holders}


class _Watch:
    """Watches every turn driven on one database pool: every ``CANCEL_POLL_S``
    one query reads the cancel flags and claims of all of them, and every
    ``HEARTBEAT_S`` (at most a quarter of ``TURN_STALE_S``) one update writes
    their heartbeats — instead of a poller per turn, whose queries were a
    fifth of ``run_eval``'s database work at 32 turns at once.

    A turn whose flag is set, or that is no longer held (swept to interrupted
    while its driver was merely slow), gets its ``cancel`` event set: its
    appends would be refused anyway, and the loop should stop spending. The
    polling task runs on the loop of the drivers while any turn is watched.
    """

    def __init__(self, db: DatabaseThreads) -> None:
        self.db = db
        self.turns: dict[int, tuple[str, asyncio.Event]] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, *, turn_id: int, holder: str, cancel: asyncio.Event) -> None:
        self.turns[turn_id] = (holder, cancel)
        loop = asyncio.get_running_loop()
        if self.task is None or self.task.done() or self.task.get_loop() is not loop:
            self.task = loop.create_task(self._run())

    def discard(self, turn_id: int, holder: str) -> None:
        if self.turns.get(turn_id, ("",))[0] == holder:
            del self.turns[turn_id]

    async def _run(self) -> None:
        beat_every = max(CANCEL_POLL_S, min(float(settings.HEARTBEAT_S), float(settings.TURN_STALE_S) / 4))
        last_beat = time.monotonic()
        while self.turns:
            await asyncio.sleep(CANCEL_POLL_S)
            watched = dict(self.turns)
            if not watched:
                break
            beat = time.monotonic() - last_beat >= beat_every
            try:
                states = await self.db.run(_poll, holders={t: h for t, (h, _) in watched.items()}, beat=beat)
            except Exception:
                logger.warning("turn watch: polling %d turns failed", len(watched), exc_info=True)
                continue
            if beat:
                last_beat = time.monotonic()
            for turn_id, (holder, cancel) in watched.items():
                flagged, held = states[turn_id]
                if (flagged or not held) and self.turns.get(turn_id, ("",))[0] == holder:
                    if not held:
                        logger.warning("turn %s: the claim %s was lost; stopping", turn_id, holder)
                    cancel.set()


_watches: weakref.WeakKeyDictionary[DatabaseThreads, _Watch] = weakref.WeakKeyDictionary()


def watch_of(db: DatabaseThreads) -> _Watch:
    """The watcher of the turns driven on ``db`` (one per pool, made on first use)."""
    watch = _watches.get(db)
    if watch is None:
        watch = _watches[db] = _Watch(db)
    return watch
