"""Migration ``turns.0009_attempts_from_meta`` moves the archived attempts
of ``Turn.meta["attempts"]`` into ``TurnAttempt`` rows with nothing lost, and
back: tested on a database holding archived attempts of every reason, by
migrating back, writing rows in the old shape and migrating forward
(``MigrationExecutor``, as django-test-migrations does)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("turns", "0008_turn_attempt")]
AFTER = [("turns", "0009_attempts_from_meta")]
FINISHED = datetime(2026, 12, 1, 9, 30, 15, 250000, tzinfo=UTC).isoformat()
REVIEW = {
    "attempt": 1,
    "verdict": "retry",
    "note": "no",
    "retry_instruction": "check",
    "usage": None,
    "late": False,
}
#: Attempt 1 retried by a review, 2 continued with more steps, 3 retried by a person:
#: the old shape, key for key.
ARCHIVED = [
    {
        "attempt": 1,
        "reason": "review",
        "status": "succeeded",
        "outcome": "answered",
        "stop_reason": "final",
        "answer": "41",
        "evidence": "calculator",
        "reasoning": "6 x 7",
        "steps": 1,
        "usage": {"input_tokens": 70, "output_tokens": 9, "calls": 2, "by_role": {"review": {"calls": 1}}},
        "finished_at": FINISHED,
        "question": "What is 6 x 7?",
        "review": REVIEW,
        "trace": [{"index": 0, "completion": {"text": "41"}, "results": []}],
    },
    {
        "attempt": 2,
        "reason": "continue",
        "status": "failed",
        "outcome": "failed",
        "stop_reason": "max_steps",
        "answer": "",
        "evidence": "",
        "reasoning": "",
        "steps": 2,
        "usage": {"input_tokens": 11},
        "finished_at": FINISHED,
        "max_steps": 2,
        "timings": {"total_ms": 1200, "act_ms": 1100},
        "failure_cause": "max_steps",
        "failure_error": None,
    },
    {
        "attempt": 3,
        "reason": "retry",
        "status": "failed",
        "outcome": "failed",
        "stop_reason": "provider_error",
        "answer": "",
        "evidence": "",
        "reasoning": "",
        "steps": 0,
        "usage": {},
        "finished_at": None,
        "clarifying_question": "",
        "timings": {"total_ms": 5},
        "failure_cause": "provider_error",
        "failure_error": "HTTP 503 from the provider",
    },
]
#: Its log: attempt.retry starts attempts 2, 3 and 4 (at seq 4, 7 and 9).
EVENTS = [
    "turn.queued",
    "turn.started",
    "turn.answered",
    "attempt.retry",
    "thinking",
    "turn.failed",
    "attempt.retry",
    "turn.failed",
    "attempt.retry",
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def at_0008():
    apps = _migrate(BEFORE)
    yield apps
    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def _old_turn(apps, *, meta):
    owner = apps.get_model("auth", "User").objects.create(username="owner")
    Turn = apps.get_model("turns", "Turn")
    turn = Turn.objects.create(
        owner=owner, question="What is 6 x 7?", attempts=4, meta=meta, last_seq=len(EVENTS)
    )
    TurnEvent = apps.get_model("turns", "TurnEvent")
    for seq, type_ in enumerate(EVENTS, start=1):
        attempt = 1 + EVENTS[:seq].count("attempt.retry")
        TurnEvent.objects.create(turn=turn, seq=seq, type=type_, data={"attempt": attempt})
    return turn.pk


def test_archived_attempts_become_rows_with_nothing_lost_and_come_back(at_0008):
    meta = {
        "attempts": copy.deepcopy(ARCHIVED),
        "cancel": {"by": "owner", "at": FINISHED},
        "setup": {"attempt": 4},
    }
    turn_id = _old_turn(at_0008, meta=meta)
    bare = _old_turn_without_attempts(at_0008)

    apps = _migrate(AFTER)
    Turn, TurnAttempt = apps.get_model("turns", "Turn"), apps.get_model("turns", "TurnAttempt")
    assert Turn.objects.get(pk=turn_id).meta == {"cancel": meta["cancel"], "setup": {"attempt": 4}}
    assert Turn.objects.get(pk=bare).meta == {"review": REVIEW}  # untouched
    rows = list(TurnAttempt.objects.filter(turn_id=turn_id).order_by("number"))
    assert [(r.number, r.ended_by, r.first_seq, r.last_seq) for r in rows] == [
        (1, "review", 1, 3),
        (2, "continue", 4, 6),
        (3, "retry", 7, 8),
    ]
    first, second, third = rows
    for row, old in zip(rows, ARCHIVED, strict=True):
        for name in ("status", "outcome", "stop_reason", "answer", "evidence", "reasoning", "steps", "usage"):
            assert getattr(row, name) == old[name], (row.number, name)
    assert (first.question, first.review, first.trace) == ("What is 6 x 7?", REVIEW, ARCHIVED[0]["trace"])
    assert first.finished_at.isoformat() == FINISHED and third.finished_at is None
    assert (second.max_steps, second.timings, second.failure_cause) == (
        2,
        {"total_ms": 1200, "act_ms": 1100},
        "max_steps",
    )
    assert (third.failure_cause, third.failure_error) == ("provider_error", "HTTP 503 from the provider")
    assert TurnAttempt.objects.count() == 3

    apps = _migrate([("turns", "0010_attempt_reason")])  # why each started: what ended the one before
    rows = apps.get_model("turns", "TurnAttempt").objects.filter(turn_id=turn_id).order_by("number")
    assert [row.reason for row in rows] == ["first", "review", "continue"]

    apps = _migrate(BEFORE)
    Turn = apps.get_model("turns", "Turn")
    assert Turn.objects.get(pk=turn_id).meta == meta  # key for key, value for value
    assert apps.get_model("turns", "TurnAttempt").objects.count() == 0


def _old_turn_without_attempts(apps):
    owner = apps.get_model("auth", "User").objects.create(username="other")
    turn = apps.get_model("turns", "Turn").objects.create(owner=owner, question="q", meta={"review": REVIEW})
    return turn.pk
