"""An archived attempt is one ``TurnAttempt`` row, written by one function
(``turns.attempts.attempt_archive``); the turn's next attempt starts from the
columns' defaults (``attempt_reset``)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from turns.attempts import (
    ATTEMPT_COLUMNS,
    attempt_archive,
    attempt_of_turn,
    attempt_reset,
    continued_attempts,
    last_review_verdict,
    review_retries,
    turn_attempts,
    usage_total,
)
from turns.events import event_append
from turns.meta import meta_with_cancel, meta_with_failure
from turns.models import EventType, Turn, TurnAttempt
from turns.services import turn_continue, turn_create, turn_retry

pytestmark = pytest.mark.django_db

ENDED = {
    "status": "failed",
    "outcome": "failed",
    "stop_reason": "max_steps",
    "answer": "",
    "evidence": "",
    "reasoning": "",
    "steps": 2,
    "usage": {"input_tokens": 5},
    "finished_at": None,
}


def ended_turn(**fields) -> Turn:
    owner, _ = User.objects.get_or_create(username="owner")
    turn = turn_create(owner=owner, question="What is 6 x 7?", max_steps=2)
    Turn.objects.filter(pk=turn.pk).update(attempts=1, **{**ENDED, **fields})
    turn.refresh_from_db()
    return turn


def test_a_retry_archives_the_failure_and_forgets_the_review_and_its_question():
    meta = meta_with_failure(
        {"review": {"verdict": "retry"}, "retry_context": {}}, cause="max_steps", error=""
    )
    meta = meta_with_cancel(meta, by="owner", at="2026-01-01T00:00:00+00:00")
    turn = ended_turn(timings={"total_ms": 3})
    new = attempt_archive(attempt_of_turn(turn, ended_by="retry"), meta)
    archived = TurnAttempt.objects.get(turn=turn)
    assert (archived.failure_cause, archived.failure_error, archived.clarifying_question) == (
        "max_steps",
        None,
        "",
    )
    assert (archived.number, archived.ended_by, archived.timings) == (1, "retry", {"total_ms": 3})
    assert (archived.status, archived.stop_reason, archived.usage, archived.max_steps) == (
        "failed",
        "max_steps",
        {"input_tokens": 5},
        2,
    )
    assert set(new) == {"cancel"}
    assert meta == {
        "review": {"verdict": "retry"},
        "retry_context": {},
        "failure_cause": "max_steps",
        "cancel": {"by": "owner", "at": "2026-01-01T00:00:00+00:00"},
    }  # the argument is not changed


def test_a_continue_keeps_the_retry_question_and_records_the_step_budget():
    meta = {"retry_context": {"previous_answer": "41", "instruction": "again"}, "failure_cause": "max_steps"}
    turn = ended_turn()
    new = attempt_archive(attempt_of_turn(turn, ended_by="continue"), meta)
    archived = TurnAttempt.objects.get(turn=turn)
    assert (archived.ended_by, archived.max_steps, archived.failure_cause) == ("continue", 2, "max_steps")
    assert new["retry_context"] == meta["retry_context"] and "failure_cause" not in new


def test_a_review_retry_moves_the_review_into_the_row_and_sets_the_next_question():
    review = {
        "attempt": 1,
        "verdict": "retry",
        "note": "",
        "retry_instruction": "again",
        "usage": None,
        "late": False,
    }
    turn = ended_turn(status="succeeded", outcome="answered", stop_reason="final", answer="41")
    attempt = attempt_of_turn(turn, ended_by="review")
    attempt.question, attempt.trace = "q?", []
    new = attempt_archive(attempt, {"review": review}, retry_instruction="again")
    archived = TurnAttempt.objects.get(turn=turn)
    assert (archived.review, archived.question, archived.trace) == (review, "q?", [])
    assert archived.failure_cause is None and archived.failure_error is None
    assert new == {"retry_context": {"previous_answer": "41", "instruction": "again"}}
    Turn.objects.filter(pk=turn.pk).update(attempts=2, meta=new)
    turn.refresh_from_db()
    assert review_retries(turn_id=turn.pk) == 1 and last_review_verdict(turn) == "retry"


def test_the_row_holds_the_attempts_range_of_the_event_log():
    turn = ended_turn()
    for text in ("a", "b"):
        event_append(turn_id=turn.pk, type=EventType.THINKING, data={"text": text, "attempt": 1})
    turn_continue(turn_id=turn.pk, extra_steps=1)  # seq 4: attempt.retry starts attempt 2
    Turn.objects.filter(pk=turn.pk).update(status="failed")
    turn_retry(turn_id=turn.pk)  # seq 5: attempt.retry starts attempt 3
    first, second = TurnAttempt.objects.filter(turn=turn)
    # seq 1 is turn.queued, 2 and 3 the attempt's thinking
    assert (first.first_seq, first.last_seq, second.first_seq, second.last_seq) == (1, 3, 4, 4)
    assert (first.ended_by, second.ended_by, first.max_steps, second.max_steps) == ("continue", "retry", 2, 3)
    assert (first.reason, second.reason) == ("first", "continue")  # why each started
    assert continued_attempts(turn_id=turn.pk, attempt=2) == [1]
    assert continued_attempts(turn_id=turn.pk, attempt=3) == []  # 2 was retried, not continued


def test_a_first_attempt_reads_no_rows(django_assert_num_queries):
    turn = ended_turn()
    with django_assert_num_queries(0):
        assert turn_attempts(turn) == [] and usage_total(turn) == {"input_tokens": 5}
        assert continued_attempts(turn_id=turn.pk, attempt=1) == []


def test_the_usage_total_adds_the_archived_attempts():
    turn = ended_turn(usage={"input_tokens": 5, "output_tokens": 1, "calls": 1})
    attempt_archive(attempt_of_turn(turn, ended_by="retry"), {})
    Turn.objects.filter(pk=turn.pk).update(
        attempts=2, usage={"input_tokens": 7, "output_tokens": 2, "calls": 1}
    )
    turn.refresh_from_db()
    total = usage_total(turn)
    assert (total["input_tokens"], total["output_tokens"], total["calls"]) == (12, 3, 2)


def test_the_reset_of_a_retry_clears_every_attempt_column_and_a_continue_keeps_its_steps():
    retry, cont = attempt_reset("retry"), attempt_reset("continue")
    assert set(ATTEMPT_COLUMNS) <= set(retry)
    assert (
        retry["answer"] == ""
        and retry["steps"] == 0
        and retry["usage"] == {}
        and retry["finished_at"] is None
    )
    assert (retry["status"], retry["phase"], retry["cancel_requested"]) == ("queued", "", False)
    assert "answer" not in cont and "steps" not in cont and cont["usage"] == {} and cont["status"] == "queued"
    retry["usage"]["x"] = 1
    assert attempt_reset("retry")["usage"] == {}  # a fresh dict each time
