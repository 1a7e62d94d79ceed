"""The event log's group-commit writer (``turns.driver.writer``, issue 44): many
turns' appends in one transaction, each caller answered after the commit
with its own events or its own error."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from common.db import DatabaseThreads, rows_update
from turns import events as events_module
from turns.driver.lease import turn_claim
from turns.driver.writer import ClaimRequest, GroupWriter, claim_write, events_write, turn_writer
from turns.events import AppendRequest, NewEvent, TurnNotHeld, event_append_batch
from turns.models import EventType, Turn, TurnEvent, TurnStatus
from turns.selectors import events_after
from turns.services import turn_create

from ..evaluation.run.process_support import database_env

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent


def thinking(**data) -> NewEvent:
    return NewEvent(EventType.THINKING, data)


def seqs_of(turn_id: int) -> list[int]:
    return list(TurnEvent.objects.filter(turn_id=turn_id).order_by("seq").values_list("seq", flat=True))


def claimed_turns(owner, n: int) -> list[tuple[int, str]]:
    """``n`` turns claimed (running, 3 events each): (id, claim token)."""
    out = []
    for i in range(n):
        turn = turn_create(owner=owner, question=f"q{i}")
        claimed = turn_claim(turn_id=turn.pk, job_id="test")
        assert claimed is not None
        out.append((turn.pk, claimed.job_id))
    return out


async def test_64_concurrent_turns_keep_contiguous_seqs_in_shared_transactions(owner, db_threads, settings):
    settings.AGENTLAB_WRITER_WAIT_MS = 5
    turns = await db_threads.run(claimed_turns, owner, 64)
    acked: dict[int, list[int]] = {t: [] for t, _ in turns}

    async def drive(turn_id: int, holder: str) -> None:
        for step in range(1, 9):
            # a step is durable before the next starts: each awaits its own commit
            rows = await events_write(
                db_threads,
                turn_id=turn_id,
                events=[thinking(step=step), thinking(step=step, part=2)][: 1 + step % 2],
                turn_fields={"steps": step},
                holder=holder,
            )
            acked[turn_id] += [r.seq for r in rows]
            assert all(r.pk is not None for r in rows)

    await asyncio.gather(*(drive(t, h) for t, h in turns))
    writer = turn_writer(db_threads)
    assert writer.requests == 64 * 8
    assert writer.batches < writer.requests / 4  # shared: far fewer transactions than appends
    per_turn = 3 + sum(1 + step % 2 for step in range(1, 9))
    for turn_id, _ in turns:
        assert acked[turn_id] == list(range(4, per_turn + 1))  # in order, no gap, no repeat
        assert await db_threads.run(seqs_of, turn_id) == list(range(1, per_turn + 1))
        row = await db_threads.run(Turn.objects.get, pk=turn_id)
        assert (row.last_seq, row.steps, row.status) == (per_turn, 8, TurnStatus.RUNNING)


def one_batch(requests: list[AppendRequest | ClaimRequest]) -> tuple[GroupWriter, list[Any]]:
    """``requests`` through a writer that waits long enough to take them in
    one batch; each one's events or error."""
    writer = GroupWriter(max_batch=100, max_wait_s=0.5)
    try:
        futures = [writer.submit(r) for r in requests]
        return writer, [f.exception(timeout=10) or f.result() for f in futures]
    finally:
        writer.close()


def test_a_turn_that_lost_its_claim_is_refused_alone_in_its_batch(owner):
    (a, ha), (b, hb), (c, hc) = claimed_turns(owner, 3)
    Turn.objects.filter(pk=b).update(status=TurnStatus.INTERRUPTED)  # swept while its driver ran
    writer, outcomes = one_batch(
        [
            AppendRequest(turn_id=a, events=[thinking(n=1)], turn_fields={"steps": 1}, holder=ha),
            AppendRequest(turn_id=b, events=[thinking(n=1)], turn_fields={"steps": 1}, holder=hb),
            AppendRequest(turn_id=c, events=[thinking(n=1), thinking(n=2)], holder=hc),
            AppendRequest(turn_id=a, events=[thinking(n=2)], turn_fields={"steps": 2}, holder=ha),
        ]
    )
    assert writer.batches == 1 and writer.requests == 4  # one transaction, not retried
    assert [r.seq for r in outcomes[0]] == [4]
    assert isinstance(outcomes[1], TurnNotHeld) and str(b) in str(outcomes[1])
    assert [r.seq for r in outcomes[2]] == [4, 5]
    assert [r.seq for r in outcomes[3]] == [5]  # the same turn twice in a batch: in order
    assert seqs_of(a) == [1, 2, 3, 4, 5] and seqs_of(b) == [1, 2, 3] and seqs_of(c) == [1, 2, 3, 4, 5]
    assert Turn.objects.get(pk=a).steps == 2 and Turn.objects.get(pk=a).last_seq == 5
    assert (Turn.objects.get(pk=b).steps, Turn.objects.get(pk=b).last_seq) == (0, 3)


def test_a_bad_payload_fails_alone_and_the_rest_of_its_batch_commits(owner):
    (a, ha), (b, hb), (c, hc) = claimed_turns(owner, 3)
    writer, outcomes = one_batch(
        [
            AppendRequest(turn_id=a, events=[thinking(n=1)], holder=ha),
            AppendRequest(turn_id=b, events=[NewEvent("no.such.type", {})], holder=hb),
            AppendRequest(turn_id=c, events=[thinking(n=1)], turn_fields={"last_seq": 99}, holder=hc),
            AppendRequest(turn_id=999_999, events=[thinking(n=1)]),
        ]
    )
    assert writer.batches == 1
    assert [r.seq for r in outcomes[0]] == [4]
    assert isinstance(outcomes[1], ValueError) and "no.such.type" in str(outcomes[1])
    assert isinstance(outcomes[2], ValueError) and "last_seq" in str(outcomes[2])
    assert isinstance(outcomes[3], Turn.DoesNotExist)
    assert seqs_of(a) == [1, 2, 3, 4] and seqs_of(b) == [1, 2, 3] and seqs_of(c) == [1, 2, 3]


def test_a_batch_that_fails_whole_is_retried_request_by_request(owner):
    (a, ha), (b, hb), (c, hc) = claimed_turns(owner, 3)
    called = []

    def boom() -> None:
        raise RuntimeError("the hook of b failed")

    writer, outcomes = one_batch(
        [
            AppendRequest(turn_id=a, events=[thinking(n=1)], holder=ha, then=lambda: called.append("a")),
            AppendRequest(turn_id=b, events=[thinking(n=1)], turn_fields={"steps": 5}, holder=hb, then=boom),
            AppendRequest(turn_id=c, events=[thinking(n=1)], holder=hc),
        ]
    )
    # the batch rolled back, then each request alone: 1 + 3 transactions
    assert (writer.batches, writer.requests) == (4, 6)
    assert [r.seq for r in outcomes[0]] == [4] and [r.seq for r in outcomes[2]] == [4]
    assert isinstance(outcomes[1], RuntimeError)
    assert seqs_of(a) == [1, 2, 3, 4] and seqs_of(c) == [1, 2, 3, 4]
    assert seqs_of(b) == [1, 2, 3] and Turn.objects.get(pk=b).steps == 0  # nothing of b written
    assert called == ["a", "a"]  # in the batch (rolled back), then alone (committed)


def test_claims_share_a_batch_with_appends_and_a_turn_is_claimed_once(owner):
    ((running, holder),) = claimed_turns(owner, 1)
    q1, q2 = (turn_create(owner=owner, question=q).pk for q in ("one", "two"))
    writer, outcomes = one_batch(
        [
            ClaimRequest(turn_id=q2, token="job-x:1"),
            AppendRequest(turn_id=running, events=[thinking(n=1)], holder=holder),
            ClaimRequest(turn_id=q1, token="job-y:1"),
            ClaimRequest(turn_id=q2, token="job-z:1"),  # a duplicate delivery
        ]
    )
    assert writer.batches == 1
    assert (outcomes[0].id, outcomes[0].job_id, outcomes[0].fresh, outcomes[0].last_seq) == (
        q2,
        "job-x:1",
        True,
        3,
    )
    assert [r.seq for r in outcomes[1]] == [4]
    assert (outcomes[2].id, outcomes[2].question, outcomes[2].attempts) == (q1, "one", 1)
    assert outcomes[3] is None  # taken in the same batch by the first claim: nothing written
    for turn_id, token in ((q1, "job-y:1"), (q2, "job-x:1")):
        logged = events_after(turn_id=turn_id)
        assert [(e.seq, e.type) for e in logged] == [(1, "turn.queued"), (2, "turn.started"), (3, "phase")]
        assert logged[1].data == {"attempt": 1, "job_id": token}
        row = Turn.objects.get(pk=turn_id)
        assert (row.status, row.job_id, row.last_seq) == (TurnStatus.RUNNING, token, 3)


async def test_claim_write_claims_once_through_the_writer(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    first, second = await asyncio.gather(
        claim_write(db_threads, turn_id=turn.pk, job_id="a"),
        claim_write(db_threads, turn_id=turn.pk, job_id="b"),
    )
    assert [c is None for c in (first, second)].count(True) == 1
    won = first or second
    assert won is not None and won.job_id.split(":")[0] in ("a", "b")
    assert await db_threads.run(seqs_of, turn.pk) == [1, 2, 3]


def test_a_lone_writer_is_not_kept_waiting_for_company(owner):
    ((turn_id, holder),) = claimed_turns(owner, 1)
    writer = GroupWriter(max_batch=100, max_wait_s=0.3)
    try:
        started = time.monotonic()
        writer.submit(AppendRequest(turn_id=turn_id, events=[thinking(n=1)], holder=holder)).result(10)
        first = time.monotonic() - started
        started = time.monotonic()
        writer.submit(AppendRequest(turn_id=turn_id, events=[thinking(n=2)], holder=holder)).result(10)
        second = time.monotonic() - started
    finally:
        writer.close()
    assert first >= 0.3  # the first batch waits for more (a run starting up)
    assert second < 0.25  # it came alone: the next is written at once
    assert seqs_of(turn_id) == [1, 2, 3, 4, 5]


def test_doorbells_ring_after_the_commit_once_per_turn_per_batch(owner, monkeypatch):
    (a, ha), (b, hb) = claimed_turns(owner, 2)
    rings: list[tuple[int, list[int], int]] = []

    def ring(turn_id, frames):
        # rung after the commit: another connection sees the events already
        visible = TurnEvent.objects.filter(turn_id=turn_id).count()
        rings.append((turn_id, [f["seq"] for f in frames], visible))

    monkeypatch.setattr(events_module, "ring_turn", ring)
    one_batch(
        [
            AppendRequest(turn_id=a, events=[thinking(n=1)], holder=ha),
            AppendRequest(turn_id=b, events=[thinking(n=1)], holder=hb),
            AppendRequest(turn_id=a, events=[thinking(n=2), thinking(n=3)], holder=ha),
        ]
    )
    assert sorted(rings) == [(a, [4, 5, 6], 6), (b, [4], 4)]


def test_the_batch_statements_lock_in_id_order_and_update_many_rows_at_once(owner):
    turns = claimed_turns(owner, 3)
    ids = [t for t, _ in turns]
    outcomes = event_append_batch(
        [
            AppendRequest(turn_id=t, events=[thinking(n=t)], turn_fields={"steps": t % 7})
            for t in reversed(ids)
        ]
    )
    assert [[r.seq for r in o] for o in outcomes] == [[4], [4], [4]]
    assert {t: Turn.objects.get(pk=t).steps for t in ids} == {t: t % 7 for t in ids}
    assert rows_update(Turn, {ids[0]: {"model": "m0"}, ids[1]: {"model": "m1"}, 10**9: {"model": "x"}}) == {
        ids[0],
        ids[1],
    }
    assert list(Turn.objects.filter(pk__in=ids).order_by("pk").values_list("model", flat=True)) == [
        "m0",
        "m1",
        "",
    ]


async def test_writer_off_writes_each_append_in_its_own_transaction(owner, settings):
    settings.AGENTLAB_WRITER_BATCH = 0
    with DatabaseThreads(max_workers=2) as db:
        ((turn_id, holder),) = await db.run(claimed_turns, owner, 1)
        rows = await events_write(db, turn_id=turn_id, events=[thinking(n=1)], holder=holder)
        assert [r.seq for r in rows] == [4]
        assert "turns.driver.writer" not in db._companions


# The child appends for 64 turns through the writer and prints each
# acknowledged event; at its 6th batch of several requests it dies (exit 9)
# after the batch's INSERT and UPDATE, before the COMMIT.
KILLED_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    import django
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from common.db import DatabaseThreads
    from turns import events
    from turns.events import NewEvent
    from turns.driver.writer import events_write

    real, seen = events._turns_update, [0]

    def dies_before_commit(values):
        real(values)
        if len(values) > 1:
            seen[0] += 1
            if seen[0] == 6:
                print("dying", sorted(values), flush=True)
                os._exit(9)

    events._turns_update = dies_before_commit

    async def main(ids):
        with DatabaseThreads(max_workers=2) as db:
            async def one(turn_id):
                for step in range(1000):
                    rows = await events_write(
                        db, turn_id=turn_id, events=[NewEvent("thinking", {"step": step})]
                    )
                    print("ack", turn_id, rows[0].seq, flush=True)
            await asyncio.gather(*(one(t) for t in ids))

    asyncio.run(main([int(a) for a in sys.argv[1:]]))
    """
)


def test_a_process_killed_between_a_batch_s_insert_and_its_commit_lost_nothing_it_acknowledged(owner):
    ids = [turn_create(owner=owner, question=f"q{i}").pk for i in range(64)]
    env = {**database_env(), "AGENTLAB_WRITER_WAIT_MS": "3"}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD, *map(str, ids)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 9, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    dying = next(line for line in lines if line.startswith("dying"))
    acked = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("ack")]
    assert len(acked) > 64  # several batches were acknowledged before the kill
    stored = set(TurnEvent.objects.filter(turn_id__in=ids).values_list("turn_id", "seq"))
    assert set(acked) <= stored  # nothing acknowledged is missing
    for turn_id in ids:
        # the killed batch left nothing: every turn's log is contiguous and its row agrees
        seqs = seqs_of(turn_id)
        assert seqs == list(range(1, len(seqs) + 1))
        assert Turn.objects.get(pk=turn_id).last_seq == len(seqs)
    assert dying  # and it died in a batch of several turns


def test_a_connection_sees_the_batch_only_after_its_commit(owner):
    """What the kill test relies on, in process: until the batch's COMMIT,
    another connection sees none of its events."""
    ((turn_id, holder),) = claimed_turns(owner, 1)
    assert connection.vendor in ("postgresql", "sqlite")
    seen_inside: list[int] = []

    def peek() -> None:
        # a different thread, a different connection
        import threading

        def look() -> None:
            from django.db import connections

            try:
                seen_inside.append(TurnEvent.objects.filter(turn_id=turn_id).count())
            finally:
                connections.close_all()

        t = threading.Thread(target=look)
        t.start()
        t.join()

    one_batch([AppendRequest(turn_id=turn_id, events=[thinking(n=1)], holder=holder, then=peek)] * 2)
    assert seen_inside[0] == 3  # inside the transaction: the 2 new events not visible yet
    assert seqs_of(turn_id) == [1, 2, 3, 4, 5]
    assert events_after(turn_id=turn_id)[-1].seq == 5
