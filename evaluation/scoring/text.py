"""Text scorers: SQuAD / HotpotQA answer normalisation, ``exact`` and ``contains``.

``exact``
    Normalised exact match. Normalisation is the one of the SQuAD v1.1 and
    HotpotQA official evaluation scripts (``normalize_answer``): lower case,
    remove punctuation, drop the articles *a*, *an*, *the*, collapse whitespace.
    One widening: punctuation is every character of ``string.punctuation`` (as
    in SQuAD) *and* every Unicode punctuation character (curly quotes, dashes),
    so a model that types a typographic apostrophe is not penalised.
``contains``
    The normalised gold occurs in the normalised prediction as whole tokens
    (``"yes"`` is found in ``"yes, it is"`` but not in ``"yesterday"``).
"""

from __future__ import annotations

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
