"""Driving a replay's turns through the one turn driver, and completing each
item when its turn ends (docs/evaluating.md#replaying-recorded-turns).

Each new turn is driven by ``turns.driver.drive_turn`` — the driver every
chat and evaluation turn goes through — with the evaluation policy (nobody
approves a tool: one that needs approval stops the turn; review off, so the
path compared is the one attempt's) and a ``ReplayScript`` of its original's
path (``agentlab.agent.replay``): the recorded results are served while the
new agent follows it. Items are completed when their turn has ended: the
verdict against the original (``verdicts.turn_verdict``) and, for an original
that was a scored prediction, the new answer scored by the same scorer.
Turns run in this process, ``concurrency`` at once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from django.utils import timezone

from agentlab.agent.extensions import Extensions
from agentlab.agent.replay import ArgsMatch, RecordedCall, ReplayScript
from agentlab.agent.types import LLMProvider, ToolCall
from common.db import DatabaseThreads
from evaluation.models import Replay, ReplayItem
from evaluation.replay.replay_open import PlannedItem
from evaluation.replay.verdicts import (
    Answer,
    ItemFigures,
    StepMatch,
    path_calls,
    replay_summary,
    turn_verdict,
)
from evaluation.run.agent_path import agent_trajectories, agent_trajectory
from evaluation.run.record import example_scorer, score_without_judge
from evaluation.scoring.trajectory_match import calls_match
from evaluation.scoring.trajectory_spec import ExpectedTrajectory, TrajectoryStep
from turns.driver import EvaluationPolicy, drive_turn
from turns.jobs.ids import local_job_id
from turns.models import Turn, TurnOutcome
from turns.selectors import turn_history_data

_job_numbers = itertools.count(1)


def step_matcher(args_match: str) -> StepMatch:
    """``matches(new, recorded)`` by the trajectory scorers' rule: the same
    tool, the arguments by ``args_match`` (``exact``, ``subset``,
    ``superset``, ``ignore``; ``trajectory_match.calls_match``)."""
    spec = ExpectedTrajectory(steps=(), args_match=args_match)
    return lambda new, recorded: calls_match(spec, new, recorded)


def call_matcher(args_match: str) -> ArgsMatch:
    """``step_matcher`` for the agent loop's ``(recorded call, new ToolCall)``."""
    match = step_matcher(args_match)

    def matches(recorded: RecordedCall, call: ToolCall) -> bool:
        return match(
            TrajectoryStep(call.name, dict(call.arguments)), TrajectoryStep(recorded.name, recorded.arguments)
        )

    return matches


def recorded_script(original_id: int, *, args_match: str, live: bool) -> ReplayScript:
    """The replay script of turn ``original_id``: its path (the last
    attempt's tool calls with their results, ``agent_path``) without the
    protocol's calls, and what it was given of its conversation (its
    ``history`` event), which the replay turn is given as it was."""
    calls = [
        RecordedCall(
            name=step.tool,
            arguments=step.args,
            output=step.result or "",
            is_error=step.is_error,
            step=step.step,
        )
        for step in path_calls(agent_trajectory(original_id))
    ]
    history = turn_history_data(turn_id=original_id)
    return ReplayScript(calls, matches=call_matcher(args_match), live=live, history=history)


def _answer(turn: Turn) -> Answer:
    answered = turn.outcome == TurnOutcome.ANSWERED
    return Answer(
        outcome=turn.outcome, answer=turn.answer if answered else "", question=turn.clarifying_question
    )


def item_complete(item_id: int, *, args_match: str) -> ReplayItem:
    """Complete item ``item_id`` whose turn has ended: its verdict and
    divergence step, and its score when its original was a scored prediction
    (the same scorer; an LLM judge's grade is not asked again: unscored).
    An item whose turn has not ended (another process holds it) is left
    as it is, for a resume."""
    related = ("turn", "original", "original_prediction__example__dataset")
    item = ReplayItem.objects.select_related(*related).get(pk=item_id)
    if not item.turn.is_terminal:
        return item
    paths = agent_trajectories([item.original_id, item.turn_id])
    item.verdict, item.divergence_step = turn_verdict(
        original=paths[item.original_id],
        new=paths[item.turn_id],
        original_answer=_answer(item.original),
        new_answer=_answer(item.turn),
        matches=step_matcher(args_match),
    )
    prediction = item.original_prediction
    if prediction is not None and prediction.correct is not None:
        example = prediction.example
        item.scorer = prediction.scorer or example_scorer(example)
        answered = item.turn.outcome == TurnOutcome.ANSWERED
        score = score_without_judge(
            example=example, answer=item.turn.answer if answered else None, scorer=item.scorer
        )
        item.original_correct = prediction.correct
        item.correct, item.score = (score.correct, score.value) if score is not None else (None, None)
    item.completed_at = timezone.now()
    item.save(
        update_fields=[
            "verdict",
            "divergence_step",
            "scorer",
            "original_correct",
            "correct",
            "score",
            "completed_at",
        ]
    )
    return item


async def replay_drive(
    replay: Replay,
    planned: list[PlannedItem],
    *,
    provider: LLMProvider,
    extensions: Extensions,
    concurrency: int,
    on_item: Callable[[ReplayItem], None],
) -> None:
    """Drive ``planned`` (``concurrency`` at once) and complete each item,
    calling ``on_item`` with it; ``provider`` is closed at the end. Raises
    what the driver cannot record (a database outage); a Ctrl-C leaves the
    turns running, to be resumed."""
    # the database calls are short: a few threads serve many turns waiting on their LLM
    db = DatabaseThreads(max_workers=min(concurrency, 16) + 2)
    gate = asyncio.Semaphore(concurrency)
    policy = EvaluationPolicy(review=False)

    async def one(planned_item: PlannedItem) -> None:
        async with gate:
            if planned_item.drive:
                script = await db.run(
                    recorded_script, planned_item.original_id, args_match=replay.args_match, live=replay.live
                )
                await drive_turn(
                    planned_item.turn_id,
                    policy=policy,
                    provider=provider,
                    db=db,
                    job_id=local_job_id("eval", next(_job_numbers)),
                    extensions=extensions,
                    replay=script,
                )
            on_item(await db.run(item_complete, planned_item.item_id, args_match=replay.args_match))

    try:
        await asyncio.gather(*(one(item) for item in planned))
    finally:
        await provider.aclose()
        db.close()


def replay_finish(replay: Replay) -> dict[str, object]:
    """The replay's figures over its completed items (``replay_summary``),
    stored; the replay is ``success`` when every item is completed."""
    items = list(replay.items.all())
    figures = [
        ItemFigures(
            verdict=item.verdict,
            divergence_step=item.divergence_step,
            original_correct=item.original_correct,
            correct=item.correct,
        )
        for item in items
        if item.completed_at is not None
    ]
    replay.summary = replay_summary(figures)
    if len(figures) == len(items):
        replay.status, replay.finished_at = "success", timezone.now()
    replay.save(update_fields=["summary", "status", "finished_at"])
    return replay.summary
