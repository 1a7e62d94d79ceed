"""Which scorer an example gets, and :func:`score`, the one entry point.

Common rule, applied by :func:`score` before any scorer runs: a gold answer that
is ``None``, empty or only whitespace means the example cannot be scored
(unscored). A gold answer may be a list of aliases (TriviaQA and Natural
Questions give several): each non-blank alias is scored by the same scorer and
the prediction is correct when any alias matches (the "max over ground truths"
of the SQuAD evaluation script's ``metric_max_over_ground_truths``); an
example none of whose aliases can be scored is unscored. Each scorer then
checks that the gold is usable for it (``numeric``: a number; ``choice``: a
letter) — if not, unscored — and only then looks at the prediction; an empty
or missing prediction is wrong (``0.0``), never unscored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

from evaluation.scoring.base import Score, ScorerFn
from evaluation.scoring.choice import score_choice
from evaluation.scoring.numeric import score_numeric
from evaluation.scoring.scorer_names import PURE_SCORER_NAMES
from evaluation.scoring.sql_result import score_sql_result
from evaluation.scoring.text import score_contains, score_exact, score_f1

#: Scorer name → function. Names are stored on examples and runs; do not rename.
SCORERS: dict[str, ScorerFn] = {
    "exact": score_exact,
    "f1": score_f1,
    "numeric": score_numeric,
    "choice": score_choice,
    "contains": score_contains,
    "sql_result": score_sql_result,
}
if set(SCORERS) != PURE_SCORER_NAMES:  # one list of names: a scorer added here is added there
    raise ImportError(f"scorer_names lists {sorted(PURE_SCORER_NAMES)}, not {sorted(SCORERS)}")

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

#: Scorers that need a grading model (a provider) and so are not in
#: :data:`SCORERS`: ``judge`` (:mod:`.judge`). :func:`score` refuses them;
#: the evaluation services call the judge themselves.
MODEL_GRADED_SCORERS: frozenset[str] = frozenset({"judge"})

#: Every scorer name an example, a dataset or ``rescore --scorer`` may give.
KNOWN_SCORERS: frozenset[str] = frozenset(SCORERS) | MODEL_GRADED_SCORERS

#: The JSON types of a final answer each scorer reads as meant (the answer
#: reaches the scorer as text either way: a string as it is, anything else as
#: its JSON text — ``agentlab.agent.types.as_text``). ``sql_result`` reads
#: rows, so an array is what it expects; the others read text or a number.
EXPECTED_ANSWER_TYPES: dict[str, frozenset[str]] = {
    "exact": frozenset({"string", "number"}),
    "f1": frozenset({"string", "number"}),
    "contains": frozenset({"string", "number"}),
    "choice": frozenset({"string"}),
    "numeric": frozenset({"string", "number"}),
    "sql_result": frozenset({"string", "number", "array"}),
    "judge": frozenset({"string", "number"}),
}
_EXPECTED_WORDS = {
    "exact": "text",
    "f1": "text",
    "contains": "text",
    "choice": "an option letter",
    "numeric": "a number",
    "sql_result": "rows or a value",
    "judge": "text",
}


def answer_mismatch(*, answer_type: str | None, scorer: str) -> str:
    """How a final answer of JSON type ``answer_type`` (``string``,
    ``number``, ``boolean``, ``array``, ``object``, ``null``; ``None`` when
    not recorded) does not fit ``scorer``, or ``""`` when it fits. The answer
    is scored all the same, as its JSON text; this is what gets recorded on
    the prediction so that a wrong type is not mistaken for a wrong answer."""
    expected = EXPECTED_ANSWER_TYPES.get(scorer)
    if not answer_type or expected is None or answer_type in expected:
        return ""
    return f"a JSON {answer_type} where {_EXPECTED_WORDS[scorer]} was expected; scored as its JSON text"


def check_scorer(name: str, extra: Collection[str] = ()) -> str:
    """``name`` if it is a known scorer (:data:`KNOWN_SCORERS`, or one of
    ``extra``: the plugins' scorers, ``evaluation.scoring.plugin_scorers``);
    else ``ValueError`` naming the known ones."""
    if name not in KNOWN_SCORERS and name not in extra:
        known = ", ".join(sorted(KNOWN_SCORERS | set(extra)))
        raise ValueError(f"unknown scorer {name!r}; known scorers: {known}")
    return name


def scorer_for(
    *,
    example_scorer: str | None,
    task_type: str,
    dataset_scorer: str | None = None,
    extra: Collection[str] = (),
) -> str:
    """The scorer name to use for an example.

    The example's own scorer wins; ``None`` or ``""`` means "not set", and then
    the dataset's default scorer (``Dataset.scorer``), then
    :data:`DEFAULT_SCORER_BY_TASK_TYPE` decides, else ``"exact"``.
    ``extra``: the plugins' scorer names, known too.
    Raises ``ValueError`` naming an unknown scorer."""
    if example_scorer:
        return check_scorer(example_scorer, extra)
    if dataset_scorer:
        return check_scorer(dataset_scorer, extra)
    return check_scorer(DEFAULT_SCORER_BY_TASK_TYPE.get(task_type, FALLBACK_SCORER))


def score(
    *,
    prediction: str | None,
    gold: str | Sequence[str] | None,
    scorer: str,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Score one prediction against one gold answer with the named scorer.

    - ``prediction``: the model's final answer text, ``None`` if it gave none.
    - ``gold``: the example's gold answer text, or a list of alias texts (any
      one matching is correct); ``None``/blank/no alias → unscored.
    - ``choices``: option texts, used by ``choice``; ``metadata``: the example's
      metadata, used by ``sql_result`` (``result_rows``, ``ordered``).

    Returns a :class:`Score`; never raises for odd predictions. Raises
    ``ValueError`` for an unknown scorer name, and for ``judge``, which needs
    a grading model (:func:`evaluation.judge.grader.judge`)."""
    if check_scorer(scorer) in MODEL_GRADED_SCORERS:
        raise ValueError(f"scorer {scorer!r} needs a grading model; it is not a pure scorer")
    fn = SCORERS[scorer]
    if isinstance(gold, list | tuple):
        return _score_any(fn, prediction or "", [str(g) for g in gold], scorer, choices, metadata)
    if gold is None or not str(gold).strip():
        return Score.unscored(scorer, "gold answer is missing")
    return fn(prediction or "", str(gold), choices=choices, metadata=metadata)


def _score_any(
    fn: ScorerFn,
    prediction: str,
    aliases: list[str],
    scorer: str,
    choices: Sequence[str] | None,
    metadata: dict[str, Any] | None,
) -> Score:
    """Any-match over gold aliases: the first alias that matches decides;
    else the scored alias with the highest value (the first of equals; SQuAD's
    ``metric_max_over_ground_truths``, which matters for ``f1``'s partial
    credit); else unscored."""
    scores = [fn(prediction, g, choices=choices, metadata=metadata) for g in aliases if g.strip()]
    if not scores:
        return Score.unscored(scorer, "gold answer is missing (no alias)")
    for i, result in enumerate(scores):
        if result.correct:
            return Score.of(True, scorer, f"alias {i + 1} of {len(scores)}: {result.explanation}")
    scored = [s for s in scores if s.is_scored]
    if not scored:
        return Score.unscored(scorer, f"no alias of {len(scores)} could be scored: {scores[0].explanation}")
    best = max(scored, key=lambda s: s.value or 0.0)
    which = "first" if best is scored[0] else "best"
    return dataclasses.replace(
        best, explanation=f"no alias of {len(scores)} matched; {which}: {best.explanation}"
    )
