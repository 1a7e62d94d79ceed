"""Writes on predictions: score a finished turn against its example and
complete the prediction row (the row itself is written when the run is
planned, ``evaluation.run.plan``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from agentlab.agent.text import safe_fields
from common.db import update_by_pk
from evaluation.judge.grader import JUDGE, JudgeRequest, judge_precheck
from evaluation.models import Example, Prediction
from evaluation.run.extensions import example_subject
from evaluation.scoring.base import Score
from evaluation.scoring.dispatch import (
    KNOWN_SCORERS,
    MODEL_GRADED_SCORERS,
    answer_mismatch,
    score,
    scorer_for,
)
from evaluation.scoring.plugin_scorers import PluginScorer, plugin_scorers
from turns.attempts import first_attempt_if_review_retried, last_review_of, turn_attempts, usage_sum
from turns.meta import meta_answer_type, meta_failure
from turns.models import Turn, TurnAttempt, TurnOutcome

#: ``score_explanation`` of a prediction whose answer waits for the LLM judge
#: (``evaluation.judge.judge_pass.judge_run`` grades it and completes the row).
AWAITING_JUDGE = "awaiting the judge"


def scorer_plugins(example: Example | None = None, *, dataset_plugins: Sequence[str] = ()) -> list[str]:
    """The plugins whose scorers an example may name: ``AGENTLAB_PLUGINS``,
    its dataset's and its own (or ``dataset_plugins`` without an example)."""
    names = [*settings.AGENTLAB_PLUGINS, *dataset_plugins]
    if example is not None:
        names += [*(example.dataset.plugins or ()), *(example.plugins or ())]
    return names


def scorers_of_plugins(names: Sequence[str]) -> dict[str, PluginScorer]:
    """The plugins' scorers by name (``plugin_scorers``, the built-in names
    reserved). Raises ``agentlab.agent.plugins.PluginError``."""
    return plugin_scorers(names, reserved=KNOWN_SCORERS)


def example_scorer(example: Example) -> str:
    """The scorer ``example`` gets: its own, else its dataset's default,
    else its task type's (``scorer_for``); a plugin's scorer
    (``agentlab_scorers``) of ``scorer_plugins(example)`` may be named."""
    return scorer_for(
        example_scorer=example.scorer or None,
        task_type=example.task_type,
        dataset_scorer=example.dataset.scorer or None,
        extra=scorers_of_plugins(scorer_plugins(example)),
    )


def score_without_judge(
    *,
    example: Example,
    answer: str | None,
    scorer: str,
    steps: int = 0,
    usage: Mapping[str, Any] | None = None,
    plugins: Sequence[str] = (),
) -> Score | None:
    """The score of ``answer`` (``None``: the turn gave none) under
    ``scorer``, or ``None`` when it is the judge's to give: a pure scorer
    scores at once; a plugin's scorer (of ``scorer_plugins(example)`` and
    ``plugins``) is given the example and ``{"answer", "steps", "usage"}``;
    the judge is not asked about a missing gold answer (unscored) or a
    missing answer (wrong)."""
    if scorer not in KNOWN_SCORERS:
        found = scorers_of_plugins([*scorer_plugins(example), *plugins]).get(scorer)
        if found is None:
            return Score.unscored(scorer, f"no plugin provides scorer {scorer!r}")
        prediction = {"answer": answer, "steps": steps, "usage": dict(usage or {})}
        return found.score(example_subject(example), prediction)
    if scorer not in MODEL_GRADED_SCORERS:
        return score(
            prediction=answer,
            gold=example.answer,
            scorer=scorer,
            choices=example.choices,
            metadata=example.metadata,
        )
    request = JudgeRequest(
        question=example.question, prediction=answer or "", gold=example.answer, rubric="", model=""
    )
    return judge_precheck(request)


@dataclass(frozen=True)
class TurnFinal:
    """What a prediction is scored from: a turn's final state.

    Built from the turn row (``from_turn``) or, inside the terminal event's
    transaction, from the fields the driver has just written
    (``from_fields``) — the same values either way, so the fast path and the
    read-back path score alike.
    """

    outcome: str
    answer: str
    evidence: str
    reasoning: str
    steps: int
    stop_reason: str
    usage: dict[str, Any]
    meta: dict[str, Any]
    timings: dict[str, Any]
    #: the turn's archived attempts, oldest first (``TurnAttempt``)
    archived: tuple[TurnAttempt, ...] = ()

    @classmethod
    def from_turn(cls, turn: Turn) -> TurnFinal:
        return cls(
            archived=tuple(turn_attempts(turn)),
            outcome=turn.outcome,
            answer=turn.answer,
            evidence=turn.evidence,
            reasoning=turn.reasoning,
            steps=turn.steps,
            stop_reason=turn.stop_reason,
            usage=turn.usage or {},
            meta=turn.meta or {},
            timings=turn.timings or {},
        )

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any], *, turn_id: int) -> TurnFinal:
        """From the turn fields of a terminal event (``TurnPolicy.on_finish``):
        no query when they say the turn is on its first attempt (``attempts``
        1), one for its archived attempts otherwise."""
        attempts = fields.get("attempts")
        archived = () if attempts == 1 else tuple(TurnAttempt.objects.filter(turn_id=turn_id))
        return cls(
            archived=archived,
            outcome=fields.get("outcome") or "",
            answer=fields.get("answer") or "",
            evidence=fields.get("evidence") or "",
            reasoning=fields.get("reasoning") or "",
            steps=int(fields.get("steps") or 0),
            stop_reason=fields.get("stop_reason") or "",
            usage=dict(fields.get("usage") or {}),
            meta=dict(fields.get("meta") or {}),
            timings=dict(fields.get("timings") or {}),
        )


def prediction_values(
    *, example: Example, turn: TurnFinal | None, error: str | None = None, latency_ms: int | None = None
) -> dict[str, Any]:
    """The fields of a completed prediction, made safe to store
    (``agentlab.agent.text.safe_fields``: the same bytes on both databases);
    see ``_prediction_values``."""
    return safe_fields(_prediction_values(example=example, turn=turn, error=error, latency_ms=latency_ms))


def _prediction_values(
    *, example: Example, turn: TurnFinal | None, error: str | None = None, latency_ms: int | None = None
) -> dict[str, Any]:
    """The fields of a completed prediction (a dict of ``Prediction`` field
    values, ``completed_at`` included), scored against ``example``.

    The turn's final state is the source of truth (answer, steps, usage,
    stop reason). A turn that did not answer scores as wrong — it stays in
    the accuracy denominator — unless the example cannot be scored at all
    (unscored). An answer the LLM judge is to grade is left unscored with
    ``score_explanation`` ``AWAITING_JUDGE`` and ``completed_at`` ``None``:
    ``evaluation.judge.judge_pass.judge_run`` grades it and completes the row (a run
    cut off before that plans the row again and the judge grades it then).
    ``error`` is the driver's error, if any; a failed turn's cause is used
    otherwise; no turn at all is an error too.
    """
    scorer = example_scorer(example)
    answered = turn is not None and turn.outcome == TurnOutcome.ANSWERED
    answer = turn.answer if answered and turn is not None else None
    # the judge's answers wait for judge_run, which completes the row
    usage = usage_sum(turn.usage, turn.archived) if turn is not None else {}
    steps = turn.steps if turn is not None else 0
    result = score_without_judge(example=example, answer=answer, scorer=scorer, steps=steps, usage=usage)
    awaiting = result is None
    if result is None:
        result = Score.unscored(JUDGE, AWAITING_JUDGE)
    calls = int(usage.get("calls") or 0)
    unknown = int(usage.get("unknown_calls") or 0)
    tokens_known = calls > 0 and unknown == 0
    if turn is not None and not error and turn.outcome == TurnOutcome.FAILED:
        cause, failure = meta_failure(turn.meta)
        error = failure or cause or "failed"
    if turn is None and not error:
        error = "no turn was run"
    if latency_ms is None and turn is not None:
        latency_ms = turn.timings.get("total_ms")
    first = first_attempt_if_review_retried(turn.archived) if turn is not None else None
    if first is None:
        first_correct = result.correct
    else:
        first_answer = first.answer if first.outcome == TurnOutcome.ANSWERED else None
        # the judge is not paid twice for one example: its first attempt stays unscored
        first_score = score_without_judge(example=example, answer=first_answer, scorer=scorer)
        first_correct = first_score.correct if first_score is not None else None
    return {
        "prediction": answer or "",
        "scorer": scorer,
        "score": result.value,
        "correct": result.correct,
        "score_explanation": result.explanation,
        "judgement": {},
        "evidence": turn.evidence if turn is not None else "",
        "reasoning": turn.reasoning if turn is not None else "",
        "steps": turn.steps if turn is not None else 0,
        "input_tokens": int(usage.get("input_tokens") or 0) if tokens_known else None,
        "output_tokens": int(usage.get("output_tokens") or 0) if tokens_known else None,
        "cost": usage.get("cost"),
        "stop_reason": (turn.stop_reason if turn is not None else "") or "error",
        "error": error or "",
        "latency_ms": latency_ms,
        "review_retried": first is not None,
        "first_correct": first_correct,
        "review_verdict": _verdict(turn),
        "usage": usage,
        "answer_mismatch": answer_mismatch(
            answer_type=meta_answer_type(turn.meta) if answered and turn is not None else None, scorer=scorer
        ),
        "completed_at": None if awaiting else timezone.now(),
    }


def prediction_record(
    *, prediction_id: int, error: str | None = None, latency_ms: int | None = None
) -> Prediction:
    """Complete a prediction from its turn's row and score it (see
    ``prediction_values``). Raises ``Prediction.DoesNotExist``."""
    prediction = Prediction.objects.select_related("example__dataset", "turn").get(pk=prediction_id)
    turn = TurnFinal.from_turn(prediction.turn) if prediction.turn is not None else None
    for name, value in prediction_values(
        example=prediction.example, turn=turn, error=error, latency_ms=latency_ms
    ).items():
        setattr(prediction, name, value)
    prediction.save()
    return prediction


def prediction_complete(*, prediction_id: int, example: Example, turn: TurnFinal) -> None:
    """Complete a prediction from a turn's final state already in hand — one
    ``UPDATE``, no read. ``run_eval`` calls it inside the terminal event's
    transaction (``EvaluationPolicy``), where the turn row holds exactly
    these values. Raises ``Prediction.DoesNotExist`` if the row is gone."""
    if update_by_pk(Prediction, prediction_id, prediction_values(example=example, turn=turn)) != 1:
        raise Prediction.DoesNotExist(f"prediction {prediction_id} does not exist")


def _verdict(turn: TurnFinal | None) -> str:
    """The verdict of the turn's last review; ``""`` if none."""
    review = last_review_of(turn.meta, turn.archived) if turn is not None else None
    return str(review["verdict"]) if review else ""
