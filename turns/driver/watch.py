"""The watcher of running turns: heartbeats and the cancel flag (docs/architecture.md#the-driver).

One ``TurnWatcher`` per process watches every turn any driver of the process
runs, on a thread of its own with its own database connection: Celery's
threads pool runs each task under its own ``asyncio.run``, so a watcher per
event loop (or per database pool) meant one per task — with 8 turns in a
worker, 8 heartbeat ``UPDATE``s a second from 7 connections, each touching
all 8 rows in no set order, and deadlocks between them and the event appends.

Every ``CANCEL_POLL_S`` the watcher runs **one statement** for all its turns:
on a heartbeat tick (every ``HEARTBEAT_S``, at most a quarter of
``TURN_STALE_S``) an ``UPDATE … RETURNING`` that writes the heartbeats of
the turns still held by their drivers and returns their cancel flags, which
locks the rows in id order first (``SELECT … ORDER BY id FOR NO KEY UPDATE``
on PostgreSQL, the lock an ``UPDATE`` takes anyway); on the other ticks a
``SELECT`` of the same. An event append locks one turn row; two lockers that
take rows in one order cannot wait on each other in a circle.

A turn whose flag is set, or that is no longer held (swept to interrupted
while its driver was merely slow), gets its ``cancel`` event set on its own
loop: its appends would be refused anyway, and the loop should stop spending.
A turn the watcher cannot see (deleted with its conversation) is left to its
driver, whose next write finds it gone.
The thread exits (closing its connection) ``LINGER_S`` after the last turn
left (it holds no connection while no turn runs), and starts again with
the next.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.utils import timezone

from common.db import concrete_field, connections_retire_broken, pk_column
from common.sql import execute, turns_beat_sql, turns_poll_sql
from turns.models import Turn, TurnStatus

logger = logging.getLogger(__name__)

#: How often the driver looks at the cancel flag while a turn runs, and polls
#: a pending approval (seconds). Read at call time (``watch.CANCEL_POLL_S``),
#: so a test may shorten it.
CANCEL_POLL_S = 0.5
#: How long the watcher thread stays (without querying) after its last turn
#: left, before it exits and closes its connection (seconds).
LINGER_S = 1.0

_ACTIVE = (TurnStatus.RUNNING, TurnStatus.WAITING)
# Ends only the turn's own driver writes (an interrupted turn was swept by someone else).
_FINISHED = (TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED)


def turns_poll(*, holders: Mapping[int, str], beat: bool) -> dict[int, tuple[bool, bool | None]]:
    """For each watched turn (``turn id → claim token``): ``(cancel flag,
    still held)``. One statement for any number of turns.

    With ``beat``: an ``UPDATE … RETURNING`` writes the heartbeat of every
    turn still held by its token (rows locked in id order first, see the
    module docstring) and returns their flags; a turn it did not return is
    ``None`` (not known this tick: the next plain poll tells). Without: a
    ``SELECT`` of every watched turn; one no longer running under its token
    is ``False``, one not visible at all (deleted, or not committed where
    this connection could see it) ``None`` — its driver's next write tells.
    """
    if not holders:
        return {}
    connection = connections[Turn.objects.db]
    table, pk = Turn._meta.db_table, pk_column(Turn)
    ids = sorted(holders)
    if beat:
        text = turns_beat_sql(connection, table=table, pk=pk, count=len(ids))
        now = concrete_field(Turn, "heartbeat_at").get_db_prep_save(timezone.now(), connection)
        params: list[Any] = [now, *ids, *(holders[i] for i in ids), *_ACTIVE]
    else:
        text = turns_poll_sql(connection, table=table, pk=pk, count=len(ids))
        params = list(ids)
    rows, _ = execute(connection, text, params)
    seen = {
        int(turn_id): (bool(flag), _held(job_id, status, holders.get(int(turn_id))))
        for turn_id, job_id, status, flag in rows
    }
    return {turn_id: seen.get(turn_id, (False, None)) for turn_id in holders}


def _held(job_id: str, status: str, holder: str | None) -> bool | None:
    """Whether a turn row is still held by ``holder``: ``None`` when its own
    driver has just ended it (a terminal status under the same token, seen
    before the driver stops watching: not a lost claim), else whether it is
    running or waiting under that token."""
    if job_id == holder and status in _FINISHED:
        return None
    return job_id == holder and status in _ACTIVE


@dataclass(frozen=True)
class _Watched:
    holder: str
    cancel: asyncio.Event
    loop: asyncio.AbstractEventLoop


class TurnWatcher:
    """Watches every turn driven in this process (see the module docstring).

    ``add`` and ``discard`` are called by drivers from any thread (on their
    event loop); the polling runs on the watcher's own thread. A failed poll
    (the database restarting) is logged, the broken connection closed, and
    the next tick reconnects.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[int, _Watched] = {}
        self._thread: threading.Thread | None = None
        #: set while no turn is watched and the thread holds no connection
        self._idle = threading.Event()
        self._idle.set()
        #: statements run (a test counts them)
        self.polls = 0

    def add(self, *, turn_id: int, holder: str, cancel: asyncio.Event) -> None:
        """Watch turn ``turn_id`` held under claim token ``holder``; ``cancel``
        is set (on the caller's running loop) when its flag is set or the
        claim is lost."""
        watched = _Watched(holder=holder, cancel=cancel, loop=asyncio.get_running_loop())
        with self._lock:
            self._turns[turn_id] = watched
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentlab-turn-watch", daemon=True)
                self._thread.start()

    def discard(self, turn_id: int, holder: str) -> None:
        """Stop watching ``turn_id`` if it is still watched under ``holder``."""
        with self._lock:
            current = self._turns.get(turn_id)
            if current is not None and current.holder == holder:
                del self._turns[turn_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._turns)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no turn is watched and the watcher's connection is
        closed (``InlineExecutor.stop`` does, before its own connections);
        returns whether it happened within ``timeout`` seconds."""
        return self._idle.wait(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to exit (it does ``LINGER_S`` after the last
        turn left); tests call this before the database is dropped."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            self._watch()
        finally:
            connections.close_all()  # this thread's own connections
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None  # gone for any reason: the next add() starts one
                if not self._turns:
                    self._idle.set()

    def _watch(self) -> None:
        beat_every = max(CANCEL_POLL_S, min(float(settings.HEARTBEAT_S), float(settings.TURN_STALE_S) / 4))
        last_beat = time.monotonic()
        idle_since: float | None = None
        while True:
            time.sleep(CANCEL_POLL_S)
            with self._lock:
                watched = dict(self._turns)
                if not watched:
                    if idle_since is None:
                        idle_since = time.monotonic()
                        # no connection kept while no turn runs (a test
                        # database must be droppable after its last turn)
                        connections.close_all()
                        self._idle.set()
                    if time.monotonic() - idle_since >= LINGER_S:
                        self._thread = None
                        return
                    continue
            idle_since = None
            beat = time.monotonic() - last_beat >= beat_every
            try:
                states = turns_poll(holders={t: w.holder for t, w in watched.items()}, beat=beat)
            except DatabaseError as exc:
                # an outage: the turns' own writes fail and say so (run_eval
                # exits 75 with one line); no traceback from here on top
                logger.info("turn watch: polling %d turns failed: %s", len(watched), exc)
                connections_retire_broken()
                continue
            except Exception:  # the thread must outlive any one failed tick
                logger.warning("turn watch: polling %d turns failed", len(watched), exc_info=True)
                continue
            finally:
                self.polls += 1
            if beat:
                last_beat = time.monotonic()
            for turn_id, w in watched.items():
                flagged, held = states[turn_id]
                if flagged or held is False:
                    self._cancel(turn_id, w, lost=held is False)

    def _cancel(self, turn_id: int, watched: _Watched, *, lost: bool) -> None:
        with self._lock:
            if self._turns.get(turn_id) is not watched:
                return
        if lost:
            logger.warning("turn %s: the claim %s was lost; stopping", turn_id, watched.holder)
        try:
            watched.loop.call_soon_threadsafe(watched.cancel.set)
        except RuntimeError:  # its loop has closed: the driver is gone already
            self.discard(turn_id, watched.holder)


_watcher = TurnWatcher()


def turn_watcher() -> TurnWatcher:
    """The process's ``TurnWatcher``."""
    return _watcher
