"""The process's one turn watcher (issue 18): one statement per tick for all
the turns of every event loop of the process, rows locked in id order,
heartbeats written only for turns still held, cancel flags delivered on
each driver's own loop."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from turns.driver import lease as lease_module
from turns.driver.lease import turn_claim, turn_watcher, turns_poll
from turns.models import Turn, TurnStatus
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)


def _claimed(owner, n: int) -> dict[int, str]:
    holders = {}
    for _ in range(n):
        turn = turn_create(owner=owner, question="q")
        claimed = turn_claim(turn_id=turn.pk, job_id="test")
        assert claimed is not None
        holders[turn.pk] = claimed.job_id
    return holders


def test_a_heartbeat_tick_is_one_statement_for_every_turn(owner):
    holders = _claimed(owner, 5)
    long_ago = timezone.now() - timedelta(hours=1)
    Turn.objects.filter(pk__in=holders).update(heartbeat_at=long_ago)
    lost, flagged = sorted(holders)[1], sorted(holders)[2]
    Turn.objects.filter(pk=lost).update(job_id="someone-else")
    Turn.objects.filter(pk=flagged).update(cancel_requested=True)

    with CaptureQueriesContext(connection) as beat:
        states = turns_poll(holders=holders, beat=True)
    assert len(beat.captured_queries) == 1
    sql = beat.captured_queries[0]["sql"]
    if connection.vendor == "postgresql":
        assert "ORDER BY" in sql and "FOR NO KEY UPDATE" in sql  # rows locked in id order
    assert states[lost] == (False, None)  # not beaten; whether it is lost, the next poll says
    assert states[flagged] == (True, True)
    assert all(states[t] == (False, True) for t in holders if t not in (lost, flagged))
    beats = dict(Turn.objects.filter(pk__in=holders).values_list("pk", "heartbeat_at"))
    assert beats[lost] == long_ago  # not ours any more: not touched
    assert all((beats[t] or long_ago) > long_ago for t in holders if t != lost)

    with CaptureQueriesContext(connection) as poll:
        assert turns_poll(holders=holders, beat=False) == {**states, lost: (False, False)}
    assert len(poll.captured_queries) == 1
    # a turn it cannot see (deleted) is left to its driver's next write
    Turn.objects.filter(pk=lost).delete()
    assert turns_poll(holders=holders, beat=False)[lost] == (False, None)


async def test_one_watcher_serves_the_turns_of_every_event_loop(owner, db_threads, monkeypatch):
    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.05)
    holders = await db_threads.run(_claimed, owner, 4)
    watcher = turn_watcher()
    results: dict[int, bool] = {}

    def drive_on_its_own_loop(turn_id: int, holder: str) -> None:
        # Celery's threads pool: each task has a loop of its own
        async def run() -> None:
            cancel = asyncio.Event()
            watcher.add(turn_id=turn_id, holder=holder, cancel=cancel)
            try:
                results[turn_id] = await asyncio.wait_for(cancel.wait(), 10) or True
            finally:
                watcher.discard(turn_id, holder)

        asyncio.run(run())

    threads = [threading.Thread(target=drive_on_its_own_loop, args=item) for item in holders.items()]
    for thread in threads:
        thread.start()
    while len(watcher) < 4:
        await asyncio.sleep(0.01)
    # a watcher thread left by an earlier test may be in a sleep of the
    # default CANCEL_POLL_S (0.5 s): count from its first tick at 0.05 s
    started = watcher.polls
    while watcher.polls < started + 2:
        await asyncio.sleep(0.01)
    polls = watcher.polls
    await asyncio.sleep(0.3)
    ticks = watcher.polls - polls
    assert 2 <= ticks <= 8  # one statement per tick for the four turns, not one per turn
    await db_threads.run(Turn.objects.filter(pk__in=holders).update, cancel_requested=True)
    await asyncio.to_thread(lambda: [t.join(10) for t in threads])
    assert results == {turn_id: True for turn_id in holders}  # each loop got its own cancel
    watcher.join(5)


def test_a_turn_its_own_driver_just_ended_is_not_a_lost_claim(owner):
    """The driver commits the terminal event before it stops watching: a poll
    in between sees a finished turn under its own token, which is no lost
    claim (no warning, no cancel), while a sweep by someone else still is."""
    holders = _claimed(owner, 3)
    done, swept, running = sorted(holders)
    Turn.objects.filter(pk=done).update(status=TurnStatus.SUCCEEDED)
    Turn.objects.filter(pk=swept).update(status=TurnStatus.INTERRUPTED)
    states = turns_poll(holders=holders, beat=False)
    assert states == {done: (False, None), swept: (False, False), running: (False, True)}


async def test_a_database_outage_is_one_line_without_a_traceback(monkeypatch, caplog):
    """Before: every failed tick logged a WARNING with a traceback, printed
    ahead of run_eval's one-line exit-75 message."""
    from django.db import OperationalError

    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.02)
    failed = threading.Event()

    def down(**_: object) -> None:
        failed.set()
        raise OperationalError("connection refused")

    monkeypatch.setattr(lease_module, "turns_poll", down)
    watcher = turn_watcher()
    with caplog.at_level("INFO", logger=lease_module.logger.name):
        watcher.add(turn_id=2**40, holder="h", cancel=asyncio.Event())
        try:
            assert await asyncio.to_thread(failed.wait, 5)
            polls = watcher.polls
            while watcher.polls < polls + 2:
                await asyncio.sleep(0.01)
        finally:
            watcher.discard(2**40, "h")
    records = [r for r in caplog.records if "turn watch" in r.getMessage()]
    assert records and all(r.levelname == "INFO" and r.exc_info is None for r in records)
    assert records[0].getMessage().endswith("turns failed: connection refused")
