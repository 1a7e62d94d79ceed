"""Is the last window worse than the one before? Pure functions over counts
(docs/monitoring.md#trend-and-alert).

The two windows hold different turns, so the proportions are independent:
the interval of their difference is Newcombe's hybrid score interval,
Newcombe, R. G. (1998), "Interval estimation for the difference between
independent proportions: comparison of eleven methods", Statistics in
Medicine 17:873–890, method 10 — built on the Wilson limits of each
proportion (``evaluation.metrics.intervals.wilson_interval``), as the
paired comparison of runs is (``evaluation.compare.statistics``). It equals
statsmodels' ``confint_proportions_2indep(method="newcomb")`` (checked in
``tests/monitoring/test_drift.py``). A drop is significant at ``alpha`` when
the whole ``1 − alpha`` interval of (last − previous) lies below zero — a
one-sided test at ``alpha / 2``, so a rise never alerts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evaluation.metrics.intervals import wilson_interval


def newcombe_independent_interval(
    k1: int, n1: int, k0: int, n0: int, *, confidence: float = 0.95
) -> tuple[float, float] | None:
    """The interval ``(low, high)`` of ``k1/n1 − k0/n0`` for independent
    samples (Newcombe 1998, method 10): with ``(l, u)`` each proportion's
    Wilson limits, ``d − √((p1−l1)² + (u0−p0)²)`` to ``d + √((u1−p1)² +
    (p0−l0)²)``. ``None`` when either ``n`` is 0; ``ValueError`` for a ``k``
    outside ``0..n`` or ``confidence`` outside (0, 1)."""
    first = wilson_interval(k1, n1, confidence=confidence) if n1 else None
    second = wilson_interval(k0, n0, confidence=confidence) if n0 else None
    if first is None or second is None:
        return None
    p1, p0 = k1 / n1, k0 / n0
    (l1, u1), (l0, u0) = first, second
    d = p1 - p0
    return d - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)


@dataclass(frozen=True)
class WindowComparison:
    """The last window (``k1`` passes of ``n1``) against the previous (``k0``
    of ``n0``): ``verdict`` is ``drop`` (significant), ``steady`` (no
    significant drop) or ``too few`` (a window under the minimum count);
    ``interval`` of the difference (``None`` with ``too few``)."""

    k1: int
    n1: int
    k0: int
    n0: int
    verdict: str
    interval: tuple[float, float] | None

    def describe(self, what: str = "pass rate") -> str:
        """One line: both rates (of ``what``), the difference and its interval."""

        def rate(k: int, n: int) -> str:
            return f"{k}/{n} ({k / n:.1%})" if n else f"{k}/{n}"

        text = f"{what} {rate(self.k1, self.n1)} vs {rate(self.k0, self.n0)} in the window before"
        if self.interval is not None and self.n1 and self.n0:
            diff = self.k1 / self.n1 - self.k0 / self.n0
            text += f"; difference {diff:+.1%}, interval [{self.interval[0]:+.1%}, {self.interval[1]:+.1%}]"
        return text


def compare_windows(*, k1: int, n1: int, k0: int, n0: int, alpha: float, min_count: int) -> WindowComparison:
    """Compare the last window with the previous one. ``too few`` when either
    holds fewer than ``min_count`` scores (nothing is said about tiny
    samples); ``drop`` when the ``1 − alpha`` Newcombe interval of the
    difference lies wholly below 0; else ``steady``."""
    if n1 < min_count or n0 < min_count:
        return WindowComparison(k1, n1, k0, n0, "too few", None)
    interval = newcombe_independent_interval(k1, n1, k0, n0, confidence=1 - alpha)
    verdict = "drop" if interval is not None and interval[1] < 0 else "steady"
    return WindowComparison(k1, n1, k0, n0, verdict, interval)
