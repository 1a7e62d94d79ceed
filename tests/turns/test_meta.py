"""``Turn.meta``'s keys are written and read in one place (``turns.meta``)."""

from __future__ import annotations

from typing import Any

from turns.meta import (
    attempt_archive,
    meta_attempts,
    meta_cancel_by,
    meta_failure,
    meta_last_review_verdict,
    meta_review_retries,
    meta_with_cancel,
    meta_with_failure,
)

ENDED: dict[str, Any] = {
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


def test_reads_of_an_empty_meta_give_nothing_rather_than_raise():
    for meta in (None, {}):  # type: ignore[var-annotated]
        assert meta_attempts(meta) == [] and meta_cancel_by(meta) is None
        assert meta_failure(meta) == (None, None) and meta_last_review_verdict(meta) == ""
        assert meta_review_retries(meta) == 0


def test_a_retry_archives_the_failure_and_forgets_the_review_and_its_question():
    meta = meta_with_failure(
        {"review": {"verdict": "retry"}, "retry_context": {}}, cause="max_steps", error=""
    )
    meta = meta_with_cancel(meta, by="owner", at="2026-01-01T00:00:00+00:00")
    new, archived = attempt_archive(
        meta, attempt=1, reason="retry", clarifying_question="", max_steps=2, timings={"total_ms": 3}, **ENDED
    )
    assert (archived["failure_cause"], archived["failure_error"], archived["clarifying_question"]) == (
        "max_steps",
        None,
        "",
    )
    assert "max_steps" not in archived and archived["timings"] == {"total_ms": 3}
    assert set(new) == {"attempts", "cancel"} and new["attempts"] == [archived]
    assert meta == {
        "review": {"verdict": "retry"},
        "retry_context": {},
        "failure_cause": "max_steps",
        "cancel": {"by": "owner", "at": "2026-01-01T00:00:00+00:00"},
    }  # the argument is not changed


def test_a_continue_keeps_the_retry_question_and_records_the_step_budget():
    meta = {"retry_context": {"previous_answer": "41", "instruction": "again"}, "failure_cause": "max_steps"}
    new, archived = attempt_archive(meta, attempt=2, reason="continue", max_steps=2, timings={}, **ENDED)
    assert (archived["reason"], archived["max_steps"], archived["failure_cause"]) == (
        "continue",
        2,
        "max_steps",
    )
    assert new["retry_context"] == meta["retry_context"] and "failure_cause" not in new


def test_a_review_retry_moves_the_review_into_the_archive_and_sets_the_next_question():
    review = {
        "attempt": 1,
        "verdict": "retry",
        "note": "",
        "retry_instruction": "again",
        "usage": None,
        "late": False,
    }
    done = {**ENDED, "status": "succeeded", "outcome": "answered", "stop_reason": "final", "answer": "41"}
    new, archived = attempt_archive(
        {"review": review},
        attempt=1,
        reason="review",
        question="q?",
        trace=[],
        retry_instruction="again",
        **done,
    )
    assert (archived["review"], archived["question"], archived["trace"]) == (review, "q?", [])
    assert "failure_cause" not in archived and "timings" not in archived
    assert new == {"attempts": [archived], "retry_context": {"previous_answer": "41", "instruction": "again"}}
    assert meta_review_retries(new) == 1 and meta_last_review_verdict(new) == "retry"
