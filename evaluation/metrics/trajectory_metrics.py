"""The trajectory scorers' figures of a run (issue 48): for each of
``trajectory``, ``tool_f1``, ``steps`` and ``trajectory_judge``, how many
predictions it scored and passed, the pass rate with its 95 % Wilson
interval, the mean value with its 95 % Student-t interval (``tool_f1``'s mean
F1), overall and per task type. Pure: the rows' ``trajectory_scores`` are
``Prediction.trajectory_scores``. Unscored verdicts (an example without an
expected trajectory) stay out of every count, as for answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.metrics.intervals import mean_interval, wilson_interval


def trajectory_block(verdicts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"scored", "correct", "accuracy", "accuracy_ci", "mean", "mean_ci"}``
    over the scored ``verdicts`` (``{"value", "correct", …}``), ``None`` when
    none is scored."""
    scored = [v for v in verdicts if v.get("correct") is not None]
    if not scored:
        return None
    correct = sum(1 for v in scored if v["correct"] is True)
    values = [float(v["value"]) for v in scored if v.get("value") is not None]
    accuracy_ci = wilson_interval(correct, len(scored))
    mean_ci = mean_interval(values)
    return {
        "scored": len(scored),
        "correct": correct,
        "accuracy": correct / len(scored),
        "accuracy_ci": list(accuracy_ci) if accuracy_ci is not None else None,
        "mean": math.fsum(values) / len(values) if values else None,
        "mean_ci": list(mean_ci) if mean_ci is not None else None,
    }


def trajectory_metrics(rows: Sequence[tuple[str, Mapping[str, Any] | None]]) -> dict[str, Any] | None:
    """``{scorer: block with "per_task_type": {task type: block}}`` for every
    trajectory scorer that scored some row of ``rows`` (``(task type,
    trajectory_scores)`` pairs); ``None`` when none did."""
    out: dict[str, Any] = {}
    # the scorers in the order the rows give them (``evaluation.run.trajectory_pass``'s)
    names = dict.fromkeys(name for _, scores in rows for name in (scores or {}))
    for name in names:
        pairs = [
            (task, scores[name]) for task, scores in rows if scores and isinstance(scores.get(name), Mapping)
        ]
        block = trajectory_block([v for _, v in pairs])
        if block is None:
            continue
        per_task = {}
        for task in sorted({task for task, _ in pairs}):
            task_block = trajectory_block([v for t, v in pairs if t == task])
            if task_block is not None:
                per_task[task] = task_block
        out[name] = {**block, "per_task_type": per_task}
    return out or None
