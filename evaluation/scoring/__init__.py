"""Scorers: compare one prediction with one gold answer. Pure functions, no Django.

The evaluation service loads a prediction and its example, calls :func:`score`,
and saves the :class:`Score` it gets back (CONTRIBUTING.md#pure-scoring-and-metrics). "Could not score"
(:meth:`Score.unscored`, ``value is None``, ``correct is None``) is kept apart
from "wrong" (``value == 0.0``, ``correct is False``) — the idea and the name come
from inspect_ai's ``scorer/`` package, where an unscorable sample is not counted
as a zero.

Scorers (names are the keys of :data:`SCORERS`; they are stored on examples and
runs, so they are part of the data format and must not be renamed):

``exact``
    Normalised exact match. Normalisation is the one of the SQuAD v1.1 and
    HotpotQA official evaluation scripts (``normalize_answer``): lower case,
    remove punctuation, drop the articles *a*, *an*, *the*, collapse whitespace.
    One widening: punctuation is every character of ``string.punctuation`` (as
    in SQuAD) *and* every Unicode punctuation character (curly quotes, dashes),
    so a model that types a typographic apostrophe is not penalised.
``f1``
    SQuAD v1.1's token-level F1 after the same normalisation: ``value`` is the
    F1 in [0, 1] (partial credit), ``correct`` is exact match; the run's
    metrics give the mean F1 with its interval beside the accuracy (EM).
``numeric``
    The **last** number in the prediction (the "flexible extract" rule used for
    GSM8K in lm-evaluation-harness) against the gold number: equal within
    ``abs 1e-6``, or, for a gold that is not a whole number, one of the two
    is the other rounded to its own decimal places (:func:`is_close`), so
    ``31.33`` is ``31.333333333333332`` but ``27001`` is not ``27000``. See
    :func:`extract_last_number` for what counts as a number.
``choice``
    Multiple-choice option letter; see :func:`extract_choice` for the rule.
``contains``
    The normalised gold occurs in the normalised prediction as whole tokens
    (``"yes"`` is found in ``"yes, it is"`` but not in ``"yesterday"``).
``sql_result``
    Compares the prediction with a SQL query's result rows, cell by cell, with
    numeric tolerance and, unless the example's metadata says ``ordered: true``,
    ignoring row order; see :func:`score_sql_result`. This is the default for
    ``sql`` examples because Spider's answers are result values (``"6"``,
    ``"31.333333333333332"``, JSON lists), not SQL text — the "execution
    accuracy" view of Spider (Yu et al., 2018) applied to the agent's final
    answer.

Common rule, applied by :func:`score` before any scorer runs: a gold answer that
is ``None``, empty or only whitespace means the example cannot be scored
(unscored). A gold answer that is a list of aliases is correct when any alias
matches under the scorer (SQuAD's max over ground truths); a final answer whose
JSON type does not fit the scorer is scored as its JSON text and the mismatch
is said by :func:`answer_mismatch`. Each scorer then checks that the gold is usable for it (``numeric``:
a number; ``choice``: a letter) — if not, unscored — and only then looks at the
prediction; an empty or missing prediction is wrong (``0.0``), never unscored.

``judge``
    An LLM judge (docs/architecture.md#evaluation-semantics): a grading model reads question, gold,
    prediction and a rubric and grades ``correct`` (1.0), ``partial`` (0.5,
    scored but not correct) or ``incorrect`` (0.0); a failed call or an
    unreadable grade is unscored. It needs a provider, so it is not in
    :data:`SCORERS` and :func:`score` refuses it; see :mod:`.judge`.

Modules, one per scorer family: :mod:`.text` (normalisation, ``exact``,
``f1``, ``contains``), :mod:`.numeric`, :mod:`.choice`, :mod:`.sql_result`,
:mod:`.judge` (the LLM judge: prompt, schema, grade, cache key);
:mod:`.base` holds :class:`Score`; :mod:`.dispatch` holds :data:`SCORERS`,
the defaults per task type, :func:`scorer_for` and :func:`score`. Import the
public names from here.
"""

from __future__ import annotations

from evaluation.scoring.base import Score, ScorerFn
from evaluation.scoring.choice import extract_choice, score_choice
from evaluation.scoring.dispatch import (
    DEFAULT_SCORER_BY_TASK_TYPE,
    EXPECTED_ANSWER_TYPES,
    FALLBACK_SCORER,
    KNOWN_SCORERS,
    MODEL_GRADED_SCORERS,
    SCORERS,
    answer_mismatch,
    check_scorer,
    score,
    scorer_for,
)
from evaluation.scoring.normalize import normalize_answer
from evaluation.scoring.numbers import ABS_TOL, extract_last_number, is_close, parse_number
from evaluation.scoring.numeric import score_numeric
from evaluation.scoring.sql_result import score_sql_result
from evaluation.scoring.text import score_contains, score_exact, score_f1, token_f1

__all__ = [
    "ABS_TOL",
    "DEFAULT_SCORER_BY_TASK_TYPE",
    "EXPECTED_ANSWER_TYPES",
    "FALLBACK_SCORER",
    "KNOWN_SCORERS",
    "MODEL_GRADED_SCORERS",
    "SCORERS",
    "Score",
    "ScorerFn",
    "answer_mismatch",
    "check_scorer",
    "extract_choice",
    "extract_last_number",
    "is_close",
    "normalize_answer",
    "parse_number",
    "score",
    "score_choice",
    "score_contains",
    "score_exact",
    "score_f1",
    "score_numeric",
    "score_sql_result",
    "scorer_for",
    "token_f1",
]
