"""The judge pass: grade every prediction of a run that awaits the LLM judge
(``evaluation.judge.grader``), from the cache when it can, and complete the
rows. ``run_eval`` runs it after driving the examples, ``manage.py rescore``
instead of driving them.

It sits beside ``evaluation.run.inprocess`` rather than in the services because it
calls an LLM; the writes are ``evaluation.judge.services``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from agentlab.agent.providers.local import LocalGGUFProvider
from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads
from evaluation.judge.grader import judge, judge_precheck
from evaluation.judge.provider import judge_provider
from evaluation.judge.services import (
    JUDGED_SCORERS,
    JudgeItem,
    judge_cache_get,
    judgement_record,
    predictions_awaiting_judge,
)
from evaluation.models import Prediction, Run


@dataclass
class JudgeTally:
    """What one judge pass did: ``graded`` predictions, of which ``cached``
    came from the cache (no call), ``calls`` judge calls made (failed ones
    included; no call for a missing answer or gold), ``unscored`` left
    unscored (a failed call or an unreadable grade)."""

    graded: int = 0
    cached: int = 0
    calls: int = 0
    unscored: int = 0

    def describe(self, *, first_reason: str = "") -> str:
        """One line for people: how many answers the judge looked at, how
        many it graded and how many it could not (with ``first_reason``,
        one of their score explanations), cache hits and calls."""
        gave = self.graded - self.unscored
        line = f"judge: {self.graded} answers, {gave} graded"
        if self.unscored:
            could_not = "could not grade any" if not gave else f"could not grade {self.unscored}"
            line += f", {could_not} (left unscored" + (f": {first_reason}" if first_reason else "") + ")"
        return line + f"; {self.cached} from the cache, {self.calls} calls"


async def judge_run(
    *,
    run: Run,
    provider: LLMProvider,
    db: DatabaseThreads,
    concurrency: int = 4,
    on_done: Callable[[JudgeItem], None] | None = None,
) -> JudgeTally:
    """Grade the predictions of ``run`` that await the judge with
    ``provider`` (the judge model is ``provider.model``), at most
    ``concurrency`` calls at once, and complete each row
    (``judgement_record``). A grade cached for the same question,
    prediction, gold, rubric and model is used without a call.
    Raises ``ValueError`` for ``concurrency < 1``."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    items = await db.run(predictions_awaiting_judge, run=run, model=provider.model)
    tally = JudgeTally()
    gate = asyncio.Semaphore(concurrency)

    async def one(item: JudgeItem) -> None:
        async with gate:
            cached = await db.run(judge_cache_get, key=item.request.cache_key())
            if cached is not None:
                await db.run(judgement_record, item=item, score=cached, completion=None, cached=True)
                tally.cached += 1
            else:
                tally.calls += judge_precheck(item.request) is None  # a failed call counts too
                score, completion = await judge(provider, item.request)
                await db.run(judgement_record, item=item, score=score, completion=completion, cached=False)
                tally.unscored += score.value is None
            tally.graded += 1
            if on_done is not None:
                on_done(item)

    await asyncio.gather(*(one(item) for item in items))
    return tally


def judge_pass(
    *,
    run: Run,
    judge_model: str | None,
    run_model: str | None,
    concurrency: int,
    provider: LLMProvider | None = None,
) -> JudgeTally | None:
    """Run ``judge_run`` on ``run`` in a fresh event loop with the judge's
    provider (``provider``, else ``judge_provider``); ``None`` when no
    prediction of the run awaits the judge (no provider is built then)."""
    if not Prediction.objects.filter(run=run, scorer__in=JUDGED_SCORERS, completed_at__isnull=True).exists():
        return None
    grader = provider or judge_provider(judge_model=judge_model, run_model=run_model)
    if isinstance(grader, LocalGGUFProvider):
        grader.load()

    async def grade() -> JudgeTally:
        with DatabaseThreads(max_workers=min(concurrency, int(settings.AGENTLAB_DB_THREADS_MAX))) as db:
            try:
                return await judge_run(run=run, provider=grader, db=db, concurrency=concurrency)
            finally:
                await grader.aclose()

    return asyncio.run(grade())
