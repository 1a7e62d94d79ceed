"""An attempt of a turn: the one writer of ``TurnAttempt`` rows and the reads
on them (docs/architecture.md#the-turn-lifecycle).

The current attempt lives on the ``Turn`` row (``ATTEMPT_COLUMNS``). When
the next attempt starts — a review's ``retry`` verdict (the driver), a
person's retry or continue (``turns.services.turns``) — ``attempt_archive``
moves it into a ``TurnAttempt`` row, in the caller's transaction, and
``attempt_reset`` gives the turn's fields the next attempt starts from. The
row is built once per source: from the turn's row (``attempt_of_turn``) or
from the loop result the driver mapped to turn fields (``attempt_of_fields``,
with ``turns.driver.finish.finish_fields``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db.models import Field

from agentlab.agent.text import clean_text, json_safe
from agentlab.agent.usage import UsageTotals
from turns.event_types import ReviewData
from turns.meta import RetryContext, TurnMeta, meta_of, meta_review
from turns.models import AttemptReason, Turn, TurnAttempt, TurnStatus

#: The turn's columns that hold its current attempt; an archive copies them
#: into the attempt's row.
ATTEMPT_COLUMNS = (
    "status",
    "outcome",
    "stop_reason",
    "answer",
    "evidence",
    "reasoning",
    "clarifying_question",
    "steps",
    "usage",
    "timings",
    "finished_at",
)
#: What a continued attempt builds on: it goes on from the previous one's
#: recorded steps (and keeps its answer until it gives its own).
CONTINUE_KEEPS = frozenset({"answer", "evidence", "reasoning", "clarifying_question", "steps"})
_TEXT_COLUMNS = ("answer", "evidence", "reasoning", "clarifying_question", "question", "failure_error")
_JSON_COLUMNS = ("usage", "timings", "review", "trace")


def column_defaults(names: Iterable[str]) -> dict[str, Any]:
    """The ``Turn`` model's defaults of the columns ``names`` (a new dict per call)."""
    return {name: _turn_field(name).get_default() for name in names}


def _turn_field(name: str) -> Field[Any, Any]:
    field = Turn._meta.get_field(name)
    assert isinstance(field, Field), name  # a column, not a relation
    return field


def attempt_reset(ended_by: str) -> dict[str, Any]:
    """The turn's fields the next attempt starts from when a person retried
    or continued the turn (``ended_by``): queued, no phase, the cancel flag
    down, and the attempt's columns at their defaults — all of them for a
    retry (it starts afresh), all but ``CONTINUE_KEEPS`` for a continue."""
    keep = CONTINUE_KEEPS if ended_by == AttemptReason.CONTINUE else frozenset()
    fields = column_defaults(name for name in ATTEMPT_COLUMNS if name not in keep)
    fields.update(status=TurnStatus.QUEUED, phase="", cancel_requested=False)
    return fields


def attempt_of_turn(turn: Turn, *, ended_by: str) -> TurnAttempt:
    """The turn's current attempt as an unsaved row (for ``attempt_archive``):
    its ``ATTEMPT_COLUMNS`` and step limit; a turn that never started
    (``attempts == 0``) counts as having had attempt 1."""
    return TurnAttempt(
        turn_id=turn.pk,
        number=max(turn.attempts, 1),
        ended_by=ended_by,
        max_steps=turn.max_steps,
        **{name: getattr(turn, name) for name in ATTEMPT_COLUMNS},
    )


def attempt_of_fields(
    *,
    turn_id: int,
    number: int,
    ended_by: str,
    fields: Mapping[str, Any],
    question: str,
    trace: Sequence[Any],
) -> TurnAttempt:
    """An attempt the driver ended as an unsaved row: ``fields`` are the turn
    fields its loop result maps to (``finish_fields``; the keys outside
    ``ATTEMPT_COLUMNS`` are ignored), ``question`` what it was asked and
    ``trace`` its steps (``Step.to_dict()`` each)."""
    values = {name: fields[name] for name in ATTEMPT_COLUMNS if name in fields}
    return TurnAttempt(
        turn_id=turn_id, number=number, ended_by=ended_by, question=question, trace=list(trace), **values
    )


def attempt_archive(
    attempt: TurnAttempt, meta: Mapping[str, Any] | None, *, retry_instruction: str | None = None
) -> TurnMeta:
    """Write ``attempt`` (unsaved) as the turn's archived attempt and return
    the turn's new meta; the one writer of ``TurnAttempt``. Run it in the
    transaction that starts the next attempt, the turn's row locked.

    The failure (``failure_cause``/``failure_error``) and the answer's type
    leave the meta for the row. By ``attempt.ended_by``:

    - ``review``: the meta's ``review`` goes into the row, and the new meta
      gets ``retry_context`` (the answer and ``retry_instruction``), for the
      next attempt's question;
    - ``retry``: the next attempt starts afresh — ``retry_context`` and
      ``review`` are dropped;
    - ``continue``: ``retry_context`` stays (the continued attempt was asked
      the same question).

    The row's event-log range runs from after the previous archived
    attempt's to the turn's ``last_seq`` now; its ``reason`` is what ended
    the previous attempt (``first`` for attempt 1).
    """
    new = meta_of(meta)
    attempt.failure_cause = new.pop("failure_cause", None)
    attempt.failure_error = new.pop("failure_error", None)
    new.pop("answer_type", None)  # the next attempt answers afresh
    if attempt.ended_by == AttemptReason.REVIEW:
        attempt.review = new.pop("review", None)
        new["retry_context"] = RetryContext(previous_answer=attempt.answer, instruction=retry_instruction)
    elif attempt.ended_by == AttemptReason.RETRY:
        new.pop("retry_context", None)  # the same question again, afresh
        new.pop("review", None)
    _attempt_range(attempt)
    _clean(attempt)
    attempt.save()
    return new


def _attempt_range(attempt: TurnAttempt) -> None:
    previous = (
        TurnAttempt.objects.filter(turn_id=attempt.turn_id, number__lt=attempt.number)
        .order_by("-number")
        .values("last_seq", "ended_by")
        .first()
    ) or {"last_seq": 0, "ended_by": AttemptReason.FIRST}
    attempt.reason = previous["ended_by"]
    attempt.first_seq = (previous["last_seq"] or 0) + 1
    attempt.last_seq = Turn.objects.values_list("last_seq", flat=True).get(pk=attempt.turn_id)


def _clean(attempt: TurnAttempt) -> None:
    """Text and JSON both databases can store (``json_safe``: no NUL, no lone surrogates)."""
    for name in _TEXT_COLUMNS:
        value = getattr(attempt, name)
        if value is not None:
            setattr(attempt, name, clean_text(str(value)))
    for name in _JSON_COLUMNS:
        setattr(attempt, name, json_safe(getattr(attempt, name)))


# --- reads -------------------------------------------------------------------------


def turn_attempts(turn: Turn) -> list[TurnAttempt]:
    """The turn's archived attempts, oldest first: no query for a turn on its
    first attempt (``attempts <= 1`` has none), one otherwise (none when
    ``attempt_rows`` was prefetched)."""
    if turn.attempts <= 1:
        return []
    return list(turn.attempt_rows.all())


def usage_total(turn: Turn) -> dict[str, Any]:
    """The usage of every attempt of ``turn`` (``usage_sum``)."""
    return usage_sum(turn.usage, turn_attempts(turn))


def usage_sum(usage: Mapping[str, Any] | None, archived: Sequence[TurnAttempt]) -> dict[str, Any]:
    """The usage of every attempt of a turn: the current attempt's (the
    turn's ``usage``) plus the ``archived`` ones' — a review retry's first
    attempt cost tokens too. ``UsageTotals.to_dict()`` shape, agent and review
    calls apart in ``by_role``. What the chat page sums from the event log,
    the API, the admin and a prediction all show this."""
    if not archived:
        return dict(usage or {})  # as stored: {} before the first call
    total = UsageTotals.from_dict(dict(usage or {}))
    for attempt in archived:
        total.merge(UsageTotals.from_dict(dict(attempt.usage or {})))
    return total.to_dict()


def first_attempt_if_review_retried(archived: Sequence[TurnAttempt]) -> TurnAttempt | None:
    """The first of a turn's ``archived`` attempts (oldest first) when a
    review retried the turn (one of them ended by ``review``), else ``None``."""
    if not any(a.ended_by == AttemptReason.REVIEW for a in archived):
        return None
    return archived[0]


def last_review(turn: Turn) -> ReviewData | None:
    """A turn's last review (``last_review_of``)."""
    return last_review_of(turn.meta, turn_attempts(turn))


def last_review_of(meta: Mapping[str, Any] | None, archived: Sequence[TurnAttempt]) -> ReviewData | None:
    """A turn's last review: the current attempt's (its ``meta``'s
    ``review``), else the last ``archived`` attempt's; ``None`` if none has a
    verdict."""
    reviews = [a.review for a in archived] + [meta_review(meta)]
    for review in reversed(reviews):
        if review and review.get("verdict"):
            return review
    return None


def last_review_verdict(turn: Turn) -> str:
    """The verdict of a turn's last review (``last_review``); ``""`` if none."""
    review = last_review(turn)
    return str(review["verdict"]) if review else ""


def review_retries(*, turn_id: int) -> int:
    """How many attempts of the turn a review has retried so far (one query)."""
    return TurnAttempt.objects.filter(turn_id=turn_id, ended_by=AttemptReason.REVIEW).count()


def continued_attempts(*, turn_id: int, attempt: int) -> list[int]:
    """The earlier attempts whose steps attempt ``attempt`` continues from
    (``turn_continue`` archives them ended by ``continue``), oldest first; no
    query for a first attempt."""
    if attempt <= 1:
        return []
    ended = dict(
        TurnAttempt.objects.filter(turn_id=turn_id, number__lt=attempt).values_list("number", "ended_by")
    )
    chain: list[int] = []
    current = attempt
    while ended.get(current - 1) == AttemptReason.CONTINUE:
        current -= 1
        chain.insert(0, current)
    return chain
