"""Text scorers: SQuAD / HotpotQA answer normalisation, ``exact``, ``f1`` and ``contains``.

``exact``
    Normalised exact match. Normalisation is the one of the SQuAD v1.1 and
    HotpotQA official evaluation scripts (``normalize_answer``): lower case,
    remove punctuation, drop the articles *a*, *an*, *the*, collapse whitespace.
    One widening: punctuation is every character of ``string.punctuation`` (as
    in SQuAD) *and* every Unicode punctuation character (curly quotes, dashes),
    so a model that types a typographic apostrophe is not penalised.
``f1``
    Token-level F1 of SQuAD v1.1 (``f1_score`` in ``evaluate-v1.1.py``): the
    harmonic mean of the precision and recall of the normalised prediction's
    tokens against the normalised gold's, counted as multisets. The value is
    the F1 in [0, 1] (partial credit); ``correct`` is exact match, as SQuAD
    reports EM beside F1.
``contains``
    The normalised gold occurs in the normalised prediction as whole tokens
    (``"yes"`` is found in ``"yes, it is"`` but not in ``"yesterday"``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from evaluation.scoring.base import Score
from evaluation.scoring.normalize import normalize_answer


def score_exact(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Normalised exact match (:func:`normalize_answer` on both sides).

    A gold that normalises to ``""`` (e.g. ``"The."``) is unscored."""
    gold_norm = normalize_answer(gold)
    if not gold_norm:
        return Score.unscored("exact", f"gold {gold!r} is empty after normalisation")
    pred_norm = normalize_answer(prediction)
    if not pred_norm:
        return Score.of(False, "exact", "no prediction")
    ok = pred_norm == gold_norm
    return Score.of(ok, "exact", f"normalised {pred_norm!r} {'==' if ok else '!='} {gold_norm!r}")


def score_contains(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """The normalised gold occurs in the normalised prediction, on token boundaries."""
    gold_norm = normalize_answer(gold)
    if not gold_norm:
        return Score.unscored("contains", f"gold {gold!r} is empty after normalisation")
    pred_norm = normalize_answer(prediction)
    if not pred_norm:
        return Score.of(False, "contains", "no prediction")
    ok = f" {gold_norm} " in f" {pred_norm} "
    return Score.of(ok, "contains", f"{gold_norm!r} {'found' if ok else 'not found'} in the prediction")


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD v1.1's token F1 of two texts after :func:`normalize_answer`.

    Precision = shared tokens / prediction tokens, recall = shared tokens /
    gold tokens (shared counted as a multiset intersection), F1 their
    harmonic mean; 0.0 when nothing is shared or either side has no token.
    Source: ``f1_score`` in the SQuAD v1.1 ``evaluate-v1.1.py`` (Rajpurkar et
    al., 2016), also HotpotQA's ``hotpot_evaluate_v1.py``."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    shared = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(pred_tokens)
    recall = shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def score_f1(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Token F1 (:func:`token_f1`) as the value, exact match as ``correct``.

    ``value`` is in [0, 1]: ``"the Chief of Protocol of the US"`` against
    ``"Chief of Protocol"`` is 0.75, not correct. A gold that normalises to
    ``""`` is unscored; an empty prediction is 0.0."""
    gold_norm = normalize_answer(gold)
    if not gold_norm:
        return Score.unscored("f1", f"gold {gold!r} is empty after normalisation")
    pred_norm = normalize_answer(prediction)
    if not pred_norm:
        return Score(value=0.0, correct=False, scorer="f1", explanation="no prediction")
    f1 = token_f1(pred_norm, gold_norm)
    exact = pred_norm == gold_norm
    return Score(value=f1, correct=exact, scorer="f1", explanation=f"token F1 {f1:.3f} against {gold_norm!r}")
