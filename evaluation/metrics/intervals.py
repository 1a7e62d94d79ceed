"""Confidence intervals for the accuracies AgentLab shows — pure functions.

A rate measured on a handful of examples is not a precise number: 1 correct
of 8 is "12.5 %, somewhere between 2 % and 47 %". Every accuracy the metrics
table, the API and the admin show carries its 95 % Wilson score interval and
its n (:func:`wilson_interval`, :func:`accuracy_text`); a mean over examples
(the mean accuracy of a run with epochs) carries a Student-t interval
(:func:`mean_interval`). The comparison's statistics
(``evaluation.compare.statistics``) build on :func:`wilson_interval`.

Sources: Wilson (1927), "Probable inference, the law of succession, and
statistical inference" — the interval Brown, Cai & DasGupta (2001),
"Interval Estimation for a Binomial Proportion", recommend over the Wald
interval for small n; the closed form below equals ``scipy.stats.binomtest(k,
n).proportion_ci(method="wilson")`` and ``statsmodels``'
``proportion_confint(method="wilson")`` (checked in
``tests/evaluation/conformance``), with the normal quantile from the standard
library (``statistics.NormalDist``) — so a run's metrics cost no
``scipy.stats`` import, about a second of CPU per command.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

__all__ = ["CONFIDENCE", "accuracy_text", "mean_interval", "mean_text", "wilson_interval"]

#: The confidence level of every interval shown.
CONFIDENCE = 0.95


def wilson_interval(k: int, n: int, *, confidence: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval ``(low, high)`` of the proportion ``k / n``
    (Wilson, E. B. (1927), "Probable inference, the law of succession, and
    statistical inference", JASA 22:209–212): with ``z`` the normal quantile
    of ``(1 + confidence) / 2`` and ``p = k / n``, the centre
    ``(p + z²/2n) / (1 + z²/n)`` ± ``z √(p(1−p)/n + z²/4n²) / (1 + z²/n)``.

    ``None`` when ``n == 0`` (no interval for no observations). Raises
    ``ValueError`` when ``k`` is outside ``0..n`` or ``confidence`` outside (0, 1).
    """
    if n == 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"k must be between 0 and n={n}, got {k}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # the ends are exact at k = 0 and k = n; float arithmetic must not leave [0, 1]
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def mean_interval(values: Sequence[float], *, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The Student-t interval ``(low, high)`` of the mean of ``values`` (one
    value per example, e.g. its accuracy over epochs), clipped to [0, 1];
    ``None`` for fewer than two values. A sample with no spread gives the
    mean itself at both ends."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    from scipy import stats  # lazy, as in evaluation.compare.statistics

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return max(0.0, mean - half), min(1.0, mean + half)


def accuracy_text(correct: int, scored: int) -> str:
    """An accuracy as people should read it: ``"12.5% (1/8; 95% CI 2.2–47.1%)"``;
    ``"— (0 scored)"`` when nothing was scored."""
    interval = wilson_interval(correct, scored)
    if interval is None:
        return "— (0 scored)"
    low, high = interval
    return f"{correct / scored * 100:.1f}% ({correct}/{scored}; 95% CI {low * 100:.1f}–{high * 100:.1f}%)"


def mean_text(block: Mapping[str, Any]) -> str:
    """A mean score as people should read it: ``"0.734 (n=52; 95% CI 0.61–0.85)"``
    (``block`` is ``{"scored", "mean", "ci"}``, from ``mean_score_block``)."""
    ci = block.get("ci")
    interval = f"; 95% CI {ci[0]:.2f}–{ci[1]:.2f}" if ci else ""
    return f"{block['mean']:.3f} (n={block['scored']}{interval})"
