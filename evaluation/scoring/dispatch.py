"""Which scorer an example gets, and :func:`score`, the one entry point.

Common rule, applied by :func:`score` before any scorer runs: a gold answer that
is ``None``, empty or only whitespace means the example cannot be scored
(unscored). Each scorer then checks that the gold is usable for it (``numeric``:
a number; ``choice``: a letter) — if not, unscored — and only then looks at the
prediction; an empty or missing prediction is wrong (``0.0``), never unscored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Score, ScorerFn
from .choice import score_choice
from .numeric import score_numeric
from .sql_result import score_sql_result
from .text import score_contains, score_exact

#: Scorer name → function. Names are stored on examples and runs; do not rename.
SCORERS: dict[str, ScorerFn] = {
    "exact": score_exact,
    "numeric": score_numeric,
    "choice": score_choice,
    "contains": score_contains,
    "sql_result": score_sql_result,
}

#: Scorer used when an example names none. ``sql`` uses ``sql_result`` (not
#: ``exact``): Spider answers are result values and JSON lists, where numeric
#: tolerance and row order matter. Unlisted task types fall back to ``exact``.
DEFAULT_SCORER_BY_TASK_TYPE: dict[str, str] = {
    "math": "numeric",
    "multiple_choice": "choice",
    "document_qa": "exact",
    "sql": "sql_result",
}

FALLBACK_SCORER = "exact"


def _check_known(name: str) -> str:
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; known scorers: {', '.join(sorted(SCORERS))}")
    return name


def scorer_for(*, example_scorer: str | None, task_type: str) -> str:
    """The scorer name to use for an example.

    The example's own scorer wins; ``None`` or ``""`` means "not set", and then
    :data:`DEFAULT_SCORER_BY_TASK_TYPE` decides, else ``"exact"``.
    Raises ``ValueError`` naming an unknown scorer."""
    if example_scorer:
        return _check_known(example_scorer)
    return _check_known(DEFAULT_SCORER_BY_TASK_TYPE.get(task_type, FALLBACK_SCORER))


def score(
    *,
    prediction: str | None,
    gold: str | None,
    scorer: str,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Score one prediction against one gold answer with the named scorer.

    - ``prediction``: the model's final answer text, ``None`` if it gave none.
    - ``gold``: the example's gold answer text; ``None``/blank → unscored.
    - ``choices``: option texts, used by ``choice``; ``metadata``: the example's
      metadata, used by ``sql_result`` (``result_rows``, ``ordered``).

    Returns a :class:`Score`; never raises for odd predictions. Raises
    ``ValueError`` for an unknown scorer name."""
    fn = SCORERS[_check_known(scorer)]
    if gold is None or not str(gold).strip():
        return Score.unscored(scorer, "gold answer is missing")
    return fn(prediction or "", str(gold), choices=choices, metadata=metadata)
