"""The ``numeric`` scorer and the number reading the other scorers share.

``numeric``
    The **last** number in the prediction (the "flexible extract" rule used for
    GSM8K in lm-evaluation-harness) against the gold number, equal by
    :func:`is_close`: within ``abs 1e-6``, or one rounded to the other's
    decimal places when the gold is not a whole number. See
    :func:`extract_last_number` for what counts as a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evaluation.scoring.base import Score
from evaluation.scoring.numbers import extract_last_number, format_number, is_close, parse_number


def score_numeric(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Last number of the prediction vs. the gold number (:func:`is_close`:
    abs 1e-6, or rounding to the digits written for a gold that is not whole).

    Gold not a number (by :func:`parse_number`) → unscored. No number in the
    prediction → wrong."""
    gold_value = parse_number(gold)
    if gold_value is None:
        return Score.unscored("numeric", f"gold {gold!r} is not a number")
    pred_value = extract_last_number(prediction)
    if pred_value is None:
        return Score.of(False, "numeric", "no number in the prediction")
    ok = is_close(pred_value, gold_value)
    return Score.of(
        ok,
        "numeric",
        f"last number {format_number(pred_value)} {'==' if ok else '!='} gold {format_number(gold_value)}",
    )
