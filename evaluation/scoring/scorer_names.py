"""The names of the pure scorers, apart from their code: a dataset file is
checked against them (``evaluation.datasets.jsonl``) without importing the
scorers themselves (``evaluation.scoring.dispatch`` maps each name to its
function, and checks at import that the two agree)."""

from __future__ import annotations

#: Every pure scorer's name (stored on examples and runs; do not rename).
PURE_SCORER_NAMES: frozenset[str] = frozenset({"exact", "f1", "numeric", "choice", "contains", "sql_result"})

#: The trajectory scorers (issue 48): they grade the agent's path, not its
#: answer, and give a prediction verdicts beside its answer's
#: (``Prediction.trajectory_scores``); ``trajectory_judge`` needs a grading model.
TRAJECTORY_SCORER_NAMES: tuple[str, ...] = ("trajectory", "tool_f1", "steps", "trajectory_judge")
