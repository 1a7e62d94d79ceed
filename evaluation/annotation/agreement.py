"""Agreement statistics of human review — thin wrappers over statsmodels and scipy.

- Cohen's κ with its 95 % interval: Cohen, J. (1960), "A coefficient of
  agreement for nominal scales", Educational and Psychological Measurement
  20:37–46, via ``statsmodels.stats.inter_rater.cohens_kappa`` (its
  interval is κ ± z·SE with its asymptotic SE, Fleiss, Cohen & Everitt 1969).
- Fleiss' κ for more than two raters: Fleiss, J. L. (1971), "Measuring
  nominal scale agreement among many raters", Psychological Bulletin
  76:378–382, via ``statsmodels.stats.inter_rater.fleiss_kappa``.
- The pairwise preference: each side's win rate with the Wilson interval
  (``evaluation.metrics.intervals``) and the two-sided sign test (exact
  binomial, ties left out; Dixon & Mood (1946), "The statistical sign
  test") via ``scipy.stats.binomtest``.

statsmodels and scipy are imported inside the functions: neither may load
when the app starts (tests/config/test_startup_imports.py).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

from evaluation.metrics.intervals import wilson_interval

__all__ = ["cohen_kappa", "confusion_table", "fleiss_kappa", "pairwise_result"]


def confusion_table(pairs: Sequence[tuple[str, str]], classes: Sequence[str]) -> list[list[int]]:
    """The counts of ``pairs`` ``(row class, column class)`` as a square
    table over ``classes`` (row = first, column = second). ``ValueError``
    for a class not in ``classes``."""
    index = {c: i for i, c in enumerate(classes)}
    table = [[0] * len(classes) for _ in classes]
    for a, b in pairs:
        if a not in index or b not in index:
            raise ValueError(f"class {a if a not in index else b!r} is not one of {list(classes)}")
        table[index[a]][index[b]] += 1
    return table


def cohen_kappa(table: Sequence[Sequence[int]], *, confidence: float = 0.95) -> dict[str, float | None]:
    """Cohen's κ of a square agreement table (rater 1 rows × rater 2
    columns, counts) with its interval, clipped to [-1, 1]: ``{"kappa", "low", "high"}``
    (``None`` each when the table has fewer than two observations, or κ is
    undefined because chance agreement is 1 — one class only; the interval
    ``None`` when its asymptotic variance is undefined or 0)."""
    n = sum(sum(row) for row in table)
    if n < 2:
        return {"kappa": None, "low": None, "high": None}
    rows = [sum(row) for row in table]
    cols = [sum(col) for col in zip(*table, strict=True)]
    if sum(r * c for r, c in zip(rows, cols, strict=True)) == n * n:
        return {"kappa": None, "low": None, "high": None}
    from statsmodels.stats.inter_rater import cohens_kappa as sm_cohens_kappa

    with warnings.catch_warnings():  # its z-test under the null divides by 0 on a perfect table
        warnings.simplefilter("ignore", RuntimeWarning)
        result = sm_cohens_kappa([list(row) for row in table])
    kappa, half = float(result.kappa), NormalDist().inv_cdf(0.5 + confidence / 2) * float(result.std_kappa)
    if not math.isfinite(half) or half <= 0:
        # the asymptotic variance is undefined or 0 on a degenerate table: no
        # interval rather than NaN (which is not JSON) or a width of 0
        return {"kappa": kappa if math.isfinite(kappa) else None, "low": None, "high": None}
    return {"kappa": kappa, "low": max(-1.0, kappa - half), "high": min(1.0, kappa + half)}


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' κ of ``counts`` (one row per item, one column per class: how
    many raters gave the item that class; every row the same total, at
    least 2). ``None`` for no items or κ undefined (one class only);
    ``ValueError`` for rows of unequal totals."""
    if not counts:
        return None
    totals = {sum(row) for row in counts}
    if len(totals) != 1 or min(totals) < 2:
        raise ValueError(f"every item needs the same number (≥ 2) of ratings, got totals {sorted(totals)}")
    used = [j for j in range(len(counts[0])) if any(row[j] for row in counts)]
    if len(used) < 2:
        return None
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

    return float(sm_fleiss_kappa([list(row) for row in counts], method="fleiss"))


def pairwise_result(wins_a: int, wins_b: int, ties: int) -> dict[str, Any]:
    """A pairwise comparison of runs A and B from its counts: ``{"n",
    "wins_a", "wins_b", "ties", "win_rate_a", "win_rate_a_ci",
    "win_rate_b", "win_rate_b_ci", "sign_test_p"}``. A win rate is wins over
    all items (ties included, so the two rates and the tie rate sum to 1)
    with its 95 % Wilson interval; ``sign_test_p`` is the two-sided exact
    binomial test of ``wins_a`` of the non-tied items against ½ (``None``
    when every item tied)."""
    n = wins_a + wins_b + ties
    decided = wins_a + wins_b
    p_value: float | None = None
    if decided:
        from scipy.stats import binomtest

        p_value = float(binomtest(wins_a, decided, 0.5, alternative="two-sided").pvalue)
    return {
        "n": n,
        "wins_a": wins_a,
        "wins_b": wins_b,
        "ties": ties,
        "win_rate_a": wins_a / n if n else None,
        "win_rate_a_ci": wilson_interval(wins_a, n),
        "win_rate_b": wins_b / n if n else None,
        "win_rate_b_ci": wilson_interval(wins_b, n),
        "sign_test_p": p_value,
    }
