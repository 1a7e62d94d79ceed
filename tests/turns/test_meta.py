"""``Turn.meta``'s keys are written and read in one place (``turns.meta``);
the archived attempts are ``TurnAttempt`` rows (tests/turns/test_attempts.py)."""

from __future__ import annotations

from turns.meta import meta_cancel_by, meta_failure, meta_review


def test_reads_of_an_empty_meta_give_nothing_rather_than_raise():
    for meta in (None, {}):  # type: ignore[var-annotated]
        assert meta_cancel_by(meta) is None and meta_review(meta) is None
        assert meta_failure(meta) == (None, None)
