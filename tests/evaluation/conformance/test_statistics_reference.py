"""The comparison's and the metrics' statistics against statsmodels, scipy
and exact fractions, over grids of counts.

References: statsmodels 0.15 ``statsmodels.stats.proportion
.proportion_confint(method="wilson")``, ``statsmodels.stats
.contingency_tables.mcnemar(exact=True)``, ``statsmodels.stats.multitest
.multipletests(method="holm")``; Newcombe's (1998) method 10 written out
from the paper with exact fractions for φ and statsmodels' Wilson limits;
pass@k as the exact fraction ``1 − C(n−c, k) / C(n, k)`` (Chen et al. 2021);
Agresti & Min's (2005) adjusted interval from its formula on the 2×2 table.
The product keeps its own code; these libraries are test dependencies only.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from evaluation.compare.statistics import (
    PairedTable,
    adjusted_difference_interval,
    holm_adjust,
    mcnemar_exact_p,
    newcombe_paired_interval,
)
from evaluation.metrics.compute import pass_at_k
from evaluation.metrics.intervals import wilson_interval

WILSON_GRID = [(k, n) for n in [*range(1, 41), 57, 100, 250, 1000] for k in range(0, n + 1, max(1, n // 40))]
TABLES = [
    PairedTable(both_right=a, broken=b, fixed=c, both_wrong=d)
    for a in (0, 1, 5, 17)
    for b in (0, 1, 2, 7)
    for c in (0, 1, 3, 9)
    for d in (0, 2, 11)
    if a + b + c + d
]


def test_wilson_matches_statsmodels_over_a_grid() -> None:
    worst = 0.0
    for k, n in WILSON_GRID:
        low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
        ours = wilson_interval(k, n)
        assert ours is not None
        worst = max(worst, abs(ours[0] - max(0.0, low)), abs(ours[1] - min(1.0, high)))
    assert len(WILSON_GRID) > 800
    assert worst < 1e-12


def test_exact_mcnemar_matches_statsmodels_and_the_exact_binomial_tail() -> None:
    for fixed in range(0, 31):
        for broken in range(0, 31):
            ours = mcnemar_exact_p(fixed=fixed, broken=broken)
            reference = mcnemar([[10, broken], [fixed, 10]], exact=True).pvalue
            n = fixed + broken
            tail = sum(Fraction(math.comb(n, i), 2**n) for i in range(min(fixed, broken) + 1))
            exact = min(Fraction(1), 2 * tail) if n else Fraction(1)
            assert ours == pytest.approx(float(reference), abs=1e-12), (fixed, broken)
            assert ours == pytest.approx(float(exact), rel=1e-9, abs=1e-15), (fixed, broken)


def _newcombe_from_the_paper(table: PairedTable) -> tuple[float, float]:
    a, b, c, d = table.both_right, table.fixed, table.broken, table.both_wrong
    n = a + b + c + d
    p1, p2 = Fraction(a + b, n), Fraction(a + c, n)
    l1, u1 = proportion_confint(a + b, n, alpha=0.05, method="wilson")
    l2, u2 = proportion_confint(a + c, n, alpha=0.05, method="wilson")
    numerator = Fraction(a * d - b * c)
    if numerator > Fraction(n, 2):
        numerator -= Fraction(n, 2)
    elif numerator >= 0:
        numerator = Fraction(0)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = float(numerator) / math.sqrt(margins) if margins else 0.0
    theta = float(p1 - p2)
    dl1, du1, dl2, du2 = float(p1) - l1, u1 - float(p1), float(p2) - l2, u2 - float(p2)
    low = theta - math.sqrt(max(0.0, dl1**2 - 2 * phi * dl1 * du2 + du2**2))
    high = theta + math.sqrt(max(0.0, dl2**2 - 2 * phi * dl2 * du1 + du1**2))
    return max(-1.0, low), min(1.0, high)


def test_newcombe_matches_method_10_written_from_the_paper() -> None:
    for table in TABLES:
        ours = newcombe_paired_interval(table)
        assert ours is not None
        reference = _newcombe_from_the_paper(table)
        assert ours == pytest.approx(reference, abs=1e-12), table
    assert len(TABLES) == 4 * 4 * 4 * 3 - 1


def test_holm_matches_statsmodels() -> None:
    rng = random.Random(7)
    # statsmodels takes ~50 ms a call: 12 family sizes × 6 draws
    for m in range(1, 13):
        for _ in range(6):
            p = [rng.choice([rng.random(), rng.random() / 100, 1.0, 0.0]) for _ in range(m)]
            reference = multipletests(p, method="holm")[1]
            assert holm_adjust(p) == pytest.approx(list(reference), abs=1e-15)


def test_pass_at_k_equals_the_exact_fraction() -> None:
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_the_adjusted_interval_is_agresti_and_mins_on_right_and_wrong_values() -> None:
    """Agresti & Min (2005): add 1/2 to each cell, n' = n + 2, the Wald
    interval of (fixed' − broken') / n'."""
    for table in TABLES:
        differences = (
            [1.0] * table.fixed + [-1.0] * table.broken + [0.0] * (table.both_right + table.both_wrong)
        )
        ours = adjusted_difference_interval(differences)
        assert ours is not None
        n2 = Fraction(table.n + 2)
        fixed, broken = Fraction(table.fixed) + Fraction(1, 2), Fraction(table.broken) + Fraction(1, 2)
        mean = (fixed - broken) / n2
        variance = ((fixed + broken) / n2 - mean**2) / n2
        half = 1.959963984540054 * math.sqrt(variance)
        reference = (max(-1.0, float(mean) - half), min(1.0, float(mean) + half))
        assert ours == pytest.approx(reference, abs=1e-12), table
