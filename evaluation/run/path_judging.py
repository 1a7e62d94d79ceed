"""The trajectory judge over a run: every prediction whose turn ran gets the
``trajectory_judge`` verdict (``evaluation.judge.trajectory_judge``) in its
``trajectory_scores``, with the judgement (model, grade, cached, usage under
role ``judge``). ``manage.py rescore RUN --scorer trajectory_judge`` calls it
before the run is finished. A grade cached for the same request is used
without a call; a readable grade from a call is cached.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from django.db import transaction

from agentlab.agent.providers.local import LocalGGUFProvider
from agentlab.agent.text import safe_fields
from agentlab.agent.types import Completion, LLMProvider
from agentlab.agent.usage import UsageTotals
from evaluation.judge.grader import JudgeRequest, grade_name
from evaluation.judge.services import judge_cache_get, judge_cache_put
from evaluation.judge.trajectory_judge import (
    TRAJECTORY_JUDGE,
    as_trajectory_judge,
    judge_path,
    trajectory_judge_request,
)
from evaluation.models import Prediction, Run
from evaluation.run.agent_path import agent_trajectories
from evaluation.scoring.base import Score
from evaluation.scoring.trajectory_spec import TrajectoryFormatError, expected_trajectory


@dataclass
class PathJudgeTally:
    """What one pass did: ``graded`` paths, ``cached`` from the cache, ``calls`` made, ``unscored``."""

    graded: int = 0
    cached: int = 0
    calls: int = 0
    unscored: int = 0


def _request(p: Prediction, paths: dict, model: str) -> JudgeRequest:
    try:
        expected = expected_trajectory(p.example.metadata)
    except TrajectoryFormatError:
        expected = None
    return trajectory_judge_request(
        question=p.example.question,
        calls=paths.get(p.turn_id, []),
        answer=p.prediction,
        expected=expected.steps if expected is not None else (),
        rubric=str((p.example.metadata or {}).get("trajectory_rubric") or ""),
        model=model,
    )


def _record(
    p: Prediction, request: JudgeRequest, score: Score, completion: Completion | None, cached: bool
) -> None:
    usage = UsageTotals()
    if completion is not None:
        usage.add(completion, role="judge")
    used = usage.to_dict() if completion is not None else {}
    judgement = {"model": request.model, "grade": grade_name(score), "cached": cached, "usage": used}
    verdict = {"value": score.value, "correct": score.correct, "explanation": score.explanation}
    with transaction.atomic():
        if score.value is not None and completion is not None:
            judge_cache_put(request=request, score=score, usage=used)
        scores = dict(p.trajectory_scores or {})
        scores[TRAJECTORY_JUDGE] = safe_fields({**verdict, "judgement": judgement})
        Prediction.objects.filter(pk=p.pk).update(trajectory_scores=scores)


def path_judge_pass(*, run: Run, provider: LLMProvider, concurrency: int = 4) -> PathJudgeTally:
    """Grade the path of every prediction of ``run`` that has a turn, with
    ``provider`` (its ``model`` names the judge), at most ``concurrency``
    calls at once. Raises ``ValueError`` for ``concurrency < 1``."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    predictions = list(run.predictions.filter(turn__isnull=False).select_related("example").order_by("pk"))
    paths = agent_trajectories(p.turn_id for p in predictions if p.turn_id is not None)
    requests = [(p, _request(p, paths, provider.model)) for p in predictions]
    tally = PathJudgeTally()
    to_call = []
    for p, request in requests:
        cached = judge_cache_get(key=request.cache_key())
        if cached is not None:
            _record(p, request, as_trajectory_judge(cached), None, cached=True)
            tally.cached += 1
        else:
            to_call.append((p, request))
    if isinstance(provider, LocalGGUFProvider) and to_call:
        provider.load()

    async def grade_all() -> list[tuple[Score, Completion | None]]:
        gate = asyncio.Semaphore(concurrency)

        async def one(request: JudgeRequest) -> tuple[Score, Completion | None]:
            async with gate:
                return await judge_path(provider, request)

        try:
            return list(await asyncio.gather(*(one(r) for _, r in to_call)))
        finally:
            await provider.aclose()

    results = asyncio.run(grade_all()) if to_call else []
    for (p, request), (score, completion) in zip(to_call, results, strict=True):
        _record(p, request, score, completion, cached=False)
        tally.calls += 1
        tally.unscored += score.value is None
    tally.graded = len(requests)
    return tally
