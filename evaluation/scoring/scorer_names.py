"""The names of the pure scorers, apart from their code: a dataset file is
checked against them (``evaluation.datasets.jsonl``) without importing the
scorers themselves (``evaluation.scoring.dispatch`` maps each name to its
function, and checks at import that the two agree)."""

from __future__ import annotations

#: Every pure scorer's name (stored on examples and runs; do not rename).
PURE_SCORER_NAMES: frozenset[str] = frozenset({"exact", "f1", "numeric", "choice", "contains", "sql_result"})

#: The scorer of a simulated-user conversation judged with its ``success.rubric``
#: (the LLM judge over the whole conversation; ``evaluation.run.conversation_score``).
GOAL_SCORER = "goal"
