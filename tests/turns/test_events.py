"""The event log: one appender, consecutive seqs under concurrency, JSON-safe payloads."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections

from agentlab.agent.text import json_safe
from turns.events import NewEvent, event_append, event_append_many
from turns.models import EventType, Turn, TurnEvent
from turns.selectors import events_after
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_create_writes_turn_queued_as_seq_1(owner):
    turn = turn_create(owner=owner, question="What is 2+2?")
    turn.refresh_from_db()
    assert turn.last_seq == 1
    assert list(TurnEvent.objects.filter(turn=turn).values_list("seq", "type")) == [(1, "turn.queued")]


def test_appends_from_8_concurrent_writers_have_no_gap(owner):
    turn = turn_create(owner=owner, question="concurrency")
    per_writer = 25
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def writer(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_writer):
                if i % 5 == 4:
                    event_append_many(
                        turn_id=turn.pk,
                        events=[
                            NewEvent(EventType.THINKING, {"writer": n, "i": i, "part": 0}),
                            NewEvent(EventType.THINKING, {"writer": n, "i": i, "part": 1}),
                        ],
                    )
                else:
                    event_append(turn_id=turn.pk, type=EventType.THINKING, data={"writer": n, "i": i})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    expected = 1 + 8 * (per_writer + per_writer // 5)
    seqs = list(TurnEvent.objects.filter(turn=turn).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, expected + 1))
    turn.refresh_from_db()
    assert turn.last_seq == expected
    # each writer's own events keep their order, and a batch is contiguous
    for n in range(8):
        mine = [e for e in events_after(turn_id=turn.pk) if e.data.get("writer") == n]
        assert [(e.data["i"], e.data.get("part", 0)) for e in mine] == sorted(
            (e.data["i"], e.data.get("part", 0)) for e in mine
        )
        pairs = [e for e in mine if "part" in e.data]
        for a, b in zip(pairs[::2], pairs[1::2], strict=True):
            assert b.seq == a.seq + 1


def test_nul_bytes_and_lone_surrogates_are_stored(owner):
    turn = turn_create(owner=owner, question="dirty text")
    nasty = "a\x00b\ud800c\udfffd"
    event = event_append(
        turn_id=turn.pk,
        type=EventType.THINKING,
        data={"text": nasty, nasty: [nasty]},
        turn_fields={"answer": nasty},
    )
    stored = TurnEvent.objects.get(pk=event.pk)
    assert stored.data == {
        "text": "a\ufffdb\ufffdc\ufffdd",
        "a\ufffdb\ufffdc\ufffdd": ["a\ufffdb\ufffdc\ufffdd"],
    }
    turn.refresh_from_db()
    assert turn.answer == "a\ufffdb\ufffdc\ufffdd"


def test_payloads_round_trip_as_json(owner):
    turn = turn_create(owner=owner, question="round trip")
    data = {"n": 1, "f": 0.5, "inf": float("inf"), "t": (1, 2), "s": "é", "nested": {"k": [None, True]}}
    event = event_append(turn_id=turn.pk, type=EventType.TOOL_RESULT, data=data)
    frame = TurnEvent.objects.get(pk=event.pk).as_frame()
    assert json.loads(json.dumps(frame)) == frame
    assert frame["seq"] == 2 and frame["type"] == "tool.result"
    assert frame["data"] == {
        "n": 1,
        "f": 0.5,
        "inf": None,
        "t": [1, 2],
        "s": "é",
        "nested": {"k": [None, True]},
    }


def test_unknown_event_type_writes_nothing(owner):
    turn = turn_create(owner=owner, question="typed events")
    with pytest.raises(ValueError, match=r"unknown event type 'made\.up'"):
        event_append_many(turn_id=turn.pk, events=[NewEvent(EventType.THINKING, {}), NewEvent("made.up", {})])
    assert TurnEvent.objects.filter(turn=turn).count() == 1
    assert Turn.objects.get(pk=turn.pk).last_seq == 1


def test_events_after_returns_the_tail_in_order(owner):
    turn = turn_create(owner=owner, question="tail")
    for i in range(5):
        event_append(turn_id=turn.pk, type=EventType.THINKING, data={"i": i})
    assert [e.seq for e in events_after(turn_id=turn.pk, after=3)] == [4, 5, 6]
    assert [e.seq for e in events_after(turn_id=turn.pk, after=3, limit=2)] == [4, 5]
    assert events_after(turn_id=turn.pk, after=6) == []


def test_json_safe_converts_objects_with_to_dict():
    class Thing:
        def to_dict(self):
            return {"x": {1: "\x00"}}

    assert json_safe(Thing()) == {"x": {"1": "\ufffd"}}
    assert json_safe(float("nan")) is None


def test_duplicate_seq_is_rejected_by_the_database(owner):
    from django.db import IntegrityError, transaction

    turn = turn_create(owner=owner, question="constraint")
    with pytest.raises(IntegrityError), transaction.atomic():
        TurnEvent.objects.create(turn=turn, seq=1, type=EventType.THINKING, data={})
    assert connection.vendor in ("sqlite", "postgresql")


def test_a_claim_reserves_its_seqs_and_returns_the_claimed_row(owner):
    """``event_append_claim``: one conditional update claims the turn and
    reserves the seqs; a second claim of the same turn writes nothing."""
    from django.db import transaction

    from turns.driver.lease import event_append_claim
    from turns.services import turn_interrupt, turn_resume

    turn = turn_create(owner=owner, question="claimed?", context={"documents": ["d"]})

    def claim(token: str):
        with transaction.atomic():
            return event_append_claim(
                turn_id=turn.pk,
                job_id=token,
                count=2,
                events=lambda t: [
                    NewEvent(EventType.TURN_STARTED, {"attempt": t.attempts, "job_id": t.job_id}),
                    NewEvent(EventType.PHASE, {"phase": "act"}),
                ],
            )

    claimed, rows = claim("job-a")
    assert (claimed.id, claimed.question, claimed.context) == (turn.pk, "claimed?", {"documents": ["d"]})
    assert (claimed.attempts, claimed.job_id, claimed.last_seq, claimed.fresh) == (1, "job-a", 3, True)
    assert [(r.seq, r.type, r.data) for r in rows] == [
        (2, "turn.started", {"attempt": 1, "job_id": "job-a"}),
        (3, "phase", {"phase": "act"}),
    ]
    assert [r.pk for r in rows] == list(
        TurnEvent.objects.filter(turn=turn, seq__gte=2).values_list("pk", flat=True)
    )
    row = Turn.objects.get(pk=turn.pk)
    assert (row.status, row.job_id, row.last_seq, row.phase) == ("running", "job-a", 3, "act")
    assert row.started_at == row.heartbeat_at is not None

    assert claim("job-b") is None  # not queued any more: nothing written
    assert Turn.objects.get(pk=turn.pk).last_seq == 3 and TurnEvent.objects.filter(turn=turn).count() == 3

    turn_interrupt(turn_id=turn.pk, reason="test")
    turn_resume(turn_id=turn.pk)
    again, _ = claim("job-c")
    assert (again.attempts, again.job_id, again.fresh) == (1, "job-c", False)  # it ran before
    assert Turn.objects.get(pk=turn.pk).started_at == row.started_at


def test_a_claim_with_the_wrong_number_of_events_writes_nothing(owner):
    from django.db import transaction

    from turns.driver.lease import event_append_claim

    turn = turn_create(owner=owner, question="q")
    with pytest.raises(ValueError, match="reserved 2 seqs but 1 events"), transaction.atomic():
        event_append_claim(
            turn_id=turn.pk,
            job_id="j",
            count=2,
            events=lambda t: [NewEvent(EventType.PHASE, {"phase": "act"})],
        )
    row = Turn.objects.get(pk=turn.pk)
    assert (row.status, row.last_seq, row.job_id) == ("queued", 1, "")


def test_append_each_gives_every_turn_its_next_seq_in_one_go(owner):
    from turns.events import event_append_each
    from turns.services import NewTurn, turn_create_many

    a = turn_create(owner=owner, question="a")
    event_append(turn_id=a.pk, type=EventType.THINKING, data={"i": 1})  # a is at seq 2
    b, c = turn_create_many(owner=owner, turns=[NewTurn("b", {"k": 1}, 3), NewTurn("c", {}, 4, "m")])
    assert [(t.question, t.context, t.max_steps, t.model, t.status, t.kind) for t in (b, c)] == [
        ("b", {"k": 1}, 3, "", "queued", "evaluation"),
        ("c", {}, 4, "m", "queued", "evaluation"),
    ]
    assert [e.type for e in events_after(turn_id=b.pk)] == ["turn.queued"]

    rows = event_append_each(turn_ids=[c.pk, a.pk, b.pk], event=NewEvent(EventType.PHASE, {"phase": "act"}))
    assert [(r.turn_id, r.seq, r.type, r.data) for r in rows] == [
        (c.pk, 2, "phase", {"phase": "act"}),
        (a.pk, 3, "phase", {"phase": "act"}),
        (b.pk, 2, "phase", {"phase": "act"}),
    ]
    assert all(TurnEvent.objects.get(pk=r.pk).seq == r.seq for r in rows)
    assert {t.pk: t.last_seq for t in Turn.objects.filter(pk__in=[a.pk, b.pk, c.pk])} == {
        a.pk: 3,
        b.pk: 2,
        c.pk: 2,
    }

    with pytest.raises(Turn.DoesNotExist):
        event_append_each(turn_ids=[a.pk, a.pk + 10_000], event=NewEvent(EventType.PHASE, {"phase": "act"}))
    assert Turn.objects.get(pk=a.pk).last_seq == 3 and TurnEvent.objects.filter(turn=a).count() == 3
    with pytest.raises(ValueError, match="distinct"):
        event_append_each(turn_ids=[a.pk, a.pk], event=NewEvent(EventType.PHASE, {"phase": "act"}))
    with pytest.raises(ValueError, match="non-empty question"):
        turn_create_many(owner=owner, turns=[NewTurn("ok", {}, 1), NewTurn(" ", {}, 1)])
    assert Turn.objects.count() == 3
