"""Writes and reads around the LLM judge: which predictions await it, its
cache, and recording a grade on a prediction (the calls themselves are made
by ``evaluation.judge.judge_pass``, which sits above the services).

The cache (``JudgeCacheEntry``) is keyed by ``JudgeRequest.cache_key()`` —
question, prediction text, gold, rubric and judge model — so scoring the same
answer again (``manage.py rescore``, a resumed run) does not pay twice. Only
readable grades are cached; a failed call or an unreadable grade is asked
again next time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentlab.agent.text import safe_fields
from agentlab.agent.types import Completion
from agentlab.agent.usage import UsageTotals
from evaluation.judge.grader import JUDGE, JudgeRequest, grade_name
from evaluation.models import Example, JudgeCacheEntry, Prediction, Run
from evaluation.scoring.base import Score
from evaluation.scoring.scorer_names import GOAL_SCORER


class Judgement(TypedDict, total=False):
    """``Prediction.judgement``: the judge's grading of one prediction.

    ``model``: the judge model; ``grade``: ``correct``/``partial``/
    ``incorrect``/``unscored``; ``cached``: the grade came from the cache
    (no call, no usage); ``usage``: the judge call's usage
    (``UsageTotals.to_dict()``, role ``judge``; ``{}`` when no call was
    paid for); ``error``: why it is unscored (a failed call, no grade)."""

    model: str
    grade: str
    cached: bool
    usage: dict[str, Any]
    error: str


#: The scorers whose predictions the judge pass grades: ``judge`` (an answer)
#: and ``goal`` (a simulated user's conversation, against its ``success.rubric``).
JUDGED_SCORERS = (JUDGE, GOAL_SCORER)


@dataclass(frozen=True)
class JudgeItem:
    """A prediction awaiting the judge and what the judge is to grade."""

    prediction_id: int
    review_retried: bool
    request: JudgeRequest


def example_rubric(example: Example) -> str:
    """The judge's rubric for ``example``: its ``rubric`` metadata, else its
    dataset's, else ``""`` (the default rubric)."""
    own = (example.metadata or {}).get("rubric")
    return str(own) if own else example.dataset.rubric or ""


def predictions_awaiting_judge(*, run: Run, model: str) -> list[JudgeItem]:
    """The predictions of ``run`` that wait for the judge (scorer ``judge``,
    not completed), in example and epoch order, each with its
    ``JudgeRequest`` for judge model ``model``. One query."""
    rows = (
        Prediction.objects.filter(run=run, scorer__in=JUDGED_SCORERS, completed_at__isnull=True)
        .select_related("example__dataset")
        .order_by("example__position", "epoch", "pk")
    )
    return [
        JudgeItem(
            prediction_id=p.pk,
            review_retried=bool(p.review_retried),
            request=goal_request(p, model=model)
            if p.scorer == GOAL_SCORER
            else JudgeRequest(
                question=p.example.question,
                prediction=p.prediction,
                gold=p.gold_answer,
                rubric=example_rubric(p.example),
                model=model,
            ),
        )
        for p in rows
    ]


def goal_request(prediction: Prediction, *, model: str) -> JudgeRequest:
    """The judge's request for a simulated-user conversation (scorer
    ``goal``): the user's goal as the question and the gold, the
    conversation's transcript (the prediction's text) as the answer to
    grade, and the example's ``success.rubric``."""
    metadata = prediction.example.metadata or {}
    goal = str((metadata.get("simulated_user") or {}).get("goal") or prediction.example.question)
    return JudgeRequest(
        question=f"A user talked with an AI assistant to reach this goal: {goal}\n"
        "Grade whether the conversation below reached the goal.",
        prediction=prediction.prediction,
        gold=f"The goal is reached: {goal}",
        rubric=str((metadata.get("success") or {}).get("rubric") or ""),
        model=model,
    )


def judge_cache_get(*, key: str) -> Score | None:
    """The cached grade for ``key`` as a ``Score``, or ``None``."""
    entry = JudgeCacheEntry.objects.filter(key=key).first()
    if entry is None:
        return None
    return Score(
        value=entry.value, correct=entry.grade == "correct", scorer=JUDGE, explanation=entry.explanation
    )


def judge_cache_put(*, request: JudgeRequest, score: Score, usage: dict[str, Any]) -> None:
    """Cache a readable grade of ``request`` (call it inside the caller's
    transaction): a concurrent writer of the same key wins — its grade is the
    same question's — so an ``IntegrityError`` is dropped in a savepoint."""
    try:
        with transaction.atomic():
            JudgeCacheEntry.objects.create(
                **safe_fields(
                    {
                        "key": request.cache_key(),
                        "model": request.model[:200],
                        "grade": grade_name(score),
                        "value": score.value,
                        "explanation": score.explanation,
                        "usage": usage,
                    }
                )
            )
    except IntegrityError:
        pass  # another process cached the same question first


def judgement_record(*, item: JudgeItem, score: Score, completion: Completion | None, cached: bool) -> None:
    """Record the judge's ``score`` on the item's prediction and complete it.

    ``completion``: the judge call (its usage recorded on the prediction's
    ``judgement`` under role ``judge``, apart from the turn's usage), ``None``
    when no call was made; ``cached``: the grade came from the cache. A
    readable grade from a call is cached (a concurrent writer of the same key
    wins; the grade is the same question's)."""
    usage = UsageTotals()
    if completion is not None:
        usage.add(completion, role="judge")
    judgement: Judgement = {
        "model": item.request.model,
        "grade": grade_name(score),
        "cached": cached,
        "usage": usage.to_dict() if completion is not None else {},
    }
    if score.value is None:
        judgement["error"] = score.explanation
    with transaction.atomic():
        if score.value is not None and completion is not None and not cached:
            judge_cache_put(request=item.request, score=score, usage=judgement["usage"])
        Prediction.objects.filter(pk=item.prediction_id).update(
            **safe_fields(
                {
                    "score": score.value,
                    "correct": score.correct,
                    "score_explanation": score.explanation,
                    "judgement": dict(judgement),
                    # the first attempt of a reviewed-and-retried turn is not judged (not paid twice)
                    "first_correct": None if item.review_retried else score.correct,
                    "completed_at": timezone.now(),
                }
            )
        )
