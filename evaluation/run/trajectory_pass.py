"""The trajectory pass: give every prediction of a run whose example has an
expected trajectory (or a step limit) the pure trajectory scorers' verdicts —
``trajectory``, ``tool_f1``, ``steps`` — beside its answer verdict
(``Prediction.trajectory_scores``), from the turn's event log
(``evaluation.run.agent_path``). No agent and no model is called.

``run_finish`` runs it before the metrics are computed, so ``run_eval``,
a resumed run and ``manage.py rescore --scorer trajectory`` all score the
paths the same way; it is idempotent (the same log gives the same verdicts),
and it keeps a ``trajectory_judge`` verdict already given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Q

from evaluation.models import Prediction, Run
from evaluation.run.agent_path import agent_trajectories
from evaluation.scoring.base import Score
from evaluation.scoring.trajectory_match import score_steps, score_tool_f1, score_trajectory
from evaluation.scoring.trajectory_spec import (
    ExpectedTrajectory,
    TrajectoryFormatError,
    TrajectoryStep,
    expected_trajectory,
)

#: The examples the pass looks at: those whose metadata names a trajectory or a step limit.
HAS_TRAJECTORY = Q(example__metadata__has_key="trajectory") | Q(
    example__metadata__has_key="trajectory_max_steps"
)


def verdict(score: Score) -> dict[str, Any]:
    """A :class:`Score` as stored in ``Prediction.trajectory_scores``."""
    return {"value": score.value, "correct": score.correct, "explanation": score.explanation}


def trajectory_verdicts(
    expected: ExpectedTrajectory | None, calls: Sequence[TrajectoryStep]
) -> dict[str, Any]:
    """The pure trajectory scorers' verdicts on one path: ``{scorer: verdict}``."""
    return {
        "trajectory": verdict(score_trajectory(expected, calls)),
        "tool_f1": verdict(score_tool_f1(expected, calls)),
        "steps": verdict(score_steps(expected, calls)),
    }


def _expected(metadata: dict[str, Any] | None) -> ExpectedTrajectory | str | None:
    try:
        return expected_trajectory(metadata)
    except TrajectoryFormatError as exc:  # stored before the check existed: unscored, said why
        return f"the example's trajectory fields are bad: {exc}"


def trajectory_pass(*, run: Run) -> int:
    """Score the paths of ``run``'s predictions whose example has trajectory
    fields; return how many rows were written. Two queries to read (the
    predictions, the paths' events) and one bulk update."""
    predictions = list(
        Prediction.objects.filter(HAS_TRAJECTORY, run=run).select_related("example").order_by("pk")
    )
    if not predictions:
        return 0
    paths = agent_trajectories(p.turn_id for p in predictions if p.turn_id is not None)
    for p in predictions:
        expected = _expected(p.example.metadata)
        if isinstance(expected, str):
            scores = {
                name: verdict(Score.unscored(name, expected)) for name in ("trajectory", "tool_f1", "steps")
            }
        else:
            scores = trajectory_verdicts(expected, paths.get(p.turn_id, []) if p.turn_id else [])
        judged = (p.trajectory_scores or {}).get("trajectory_judge")
        p.trajectory_scores = {**scores, **({"trajectory_judge": judged} if judged else {})}
    Prediction.objects.bulk_update(predictions, ["trajectory_scores"], batch_size=500)
    return len(predictions)
