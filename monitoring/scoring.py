"""Scoring one finished chat turn with one online evaluator, once
(docs/monitoring.md#online-evaluators).

``online_score_turn`` is what the Celery task, the inline pool and the
backfill call. It is idempotent per (turn, evaluator): a score that exists is
left alone; a delivery claims the pair (``monitoring.score_claim``) before it
scores, so a duplicate delivery at the same moment makes no judge call
(``claimed``); and two deliveries racing to write the same one anyway meet
the unique constraint — the second writes nothing. It reads the turn after its terminal
event committed and never writes to the turn: the turn's ``usage`` stays the
agent's, the judge's usage goes on the score under role ``judge``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from agentlab.agent.history import conversation_text
from agentlab.agent.text import safe_fields
from monitoring.judging import judge_turn
from monitoring.models import OnlineEvaluator, OnlineScore
from monitoring.sampling import finished_chat_turns, sampled, turn_matches
from monitoring.score_claim import score_claim
from monitoring.scorers import (
    ScorerResult,
    answered_score,
    checks_score,
    combine,
    latency_score,
    steps_score,
)
from turns.models import EventType, Turn, TurnEvent, TurnOutcome
from turns.selectors import turn_history_data

logger = logging.getLogger("monitoring")


@dataclass(frozen=True)
class ScoringOutcome:
    """What one call did: ``status`` is ``scored`` (``score`` is the new
    row), ``exists`` (scored before: ``score`` is that row), ``claimed``
    (another delivery is scoring it right now), ``not sampled``,
    ``filtered``, ``not finished`` (no such finished chat turn) or
    ``no evaluator`` (missing or disabled)."""

    status: str
    score: OnlineScore | None = None


def turn_results(evaluator: OnlineEvaluator, turn: Turn) -> tuple[list[ScorerResult], dict]:
    """Run the evaluator's scorers on ``turn``: their results in
    ``scorer_names()`` order and the judge's usage (``{}`` without a call)."""
    results: list[ScorerResult] = []
    usage: dict = {}
    if evaluator.score_answered:
        results.append(answered_score(turn.outcome))
    if evaluator.max_steps is not None:
        results.append(steps_score(turn.steps, evaluator.max_steps))
    if evaluator.max_latency_ms is not None:
        results.append(latency_score(turn.timings or {}, evaluator.max_latency_ms))
    if evaluator.checks_plugin.strip():
        checks = TurnEvent.objects.filter(turn_id=turn.pk, type=EventType.CHECK).values_list(
            "data", flat=True
        )
        results.append(checks_score(list(checks), evaluator.checks_plugin.strip()))
    if evaluator.judge:
        asked = turn.outcome == TurnOutcome.ASKED
        history = turn_history_data(turn_id=turn.pk) or {}
        result, usage = judge_turn(
            conversation=conversation_text(history.get("messages") or []),
            question=turn.question,
            answer=turn.clarifying_question if asked else turn.answer,
            evidence=turn.evidence,
            rubric=evaluator.judge_rubric,
            model=evaluator.judge_model,
        )
        results.append(result)
    return results, usage


def online_score_turn(*, turn_id: int, evaluator_id: int, ignore_sampling: bool = False) -> ScoringOutcome:
    """Score turn ``turn_id`` with evaluator ``evaluator_id`` unless it was
    scored already, is not a finished chat turn, is outside the sample (the
    same decision every time: ``monitoring.sampling.sampled``; a backfill may
    ``ignore_sampling``) or fails the filters. Raises nothing for any of
    those; a database error propagates (the task is redelivered)."""
    evaluator = OnlineEvaluator.objects.filter(pk=evaluator_id, enabled=True).first()
    if evaluator is None:
        return ScoringOutcome("no evaluator")
    existing = OnlineScore.objects.filter(turn_id=turn_id, evaluator_id=evaluator_id).first()
    if existing is not None:
        return ScoringOutcome("exists", existing)
    if not ignore_sampling and not sampled(
        evaluator_id=evaluator_id, turn_id=turn_id, rate=evaluator.sampling_rate
    ):
        return ScoringOutcome("not sampled")
    turn = finished_chat_turns().filter(pk=turn_id).first()
    if turn is None or turn.finished_at is None:
        return ScoringOutcome("not finished")
    if not turn_matches(evaluator, turn_id):
        return ScoringOutcome("filtered")
    with score_claim(turn_id=turn_id, evaluator_id=evaluator_id) as held:
        if not held:
            return ScoringOutcome("claimed")
        return _score(evaluator, turn)


def _score(evaluator: OnlineEvaluator, turn: Turn) -> ScoringOutcome:
    """Score ``turn`` (claimed by this delivery) unless a delivery that held
    the claim before wrote its score already."""
    turn_id, evaluator_id = turn.pk, evaluator.pk
    existing = OnlineScore.objects.filter(turn_id=turn_id, evaluator_id=evaluator_id).first()
    if existing is not None:
        return ScoringOutcome("exists", existing)
    finished_at = turn.finished_at
    if finished_at is None:
        return ScoringOutcome("not finished")
    results, usage = turn_results(evaluator, turn)
    value, passed = combine(results)
    fields = safe_fields(
        {
            "value": value,
            "passed": passed,
            "label": turn.outcome,
            "details": {r.name: r.as_dict() for r in results},
            "usage": usage,
        }
    )
    try:
        with transaction.atomic():
            score = OnlineScore.objects.create(
                turn_id=turn_id, evaluator=evaluator, turn_finished_at=finished_at, **fields
            )
    except IntegrityError:
        # another delivery of the same task wrote it first
        return ScoringOutcome("exists", OnlineScore.objects.get(turn_id=turn_id, evaluator_id=evaluator_id))
    logger.info("online evaluator %r scored turn %s: %s", evaluator.name, turn_id, value)
    return ScoringOutcome("scored", score)
