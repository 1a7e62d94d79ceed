"""``plan_eval``'s sample sizes against a simulation of the exact McNemar test
and against Connor's (1987) published formula (issue 43).

For each row of a grid of baseline accuracy P, difference D and variants K,
the plan's ``n`` examples are simulated 2,000 times: the discordant count
``m ~ Binomial(n, q)``, the fixed count ``f ~ Binomial(m, π)``, and the
exact McNemar p-value (scipy's binomial tail, checked against the product's
``mcnemar_exact_p``) decides each simulated comparison at ``alpha / pairs`` (Holm's first step, the level the
plan is made for). The share of rejections is the achieved power: within
±3 pp of the target. Drawn and tested with numpy (vectorised): a row takes a fraction of a second.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from evaluation.compare.power import (
    detectable_difference,
    independent_discordance,
    mcnemar_power,
    plan_sample_size,
)
from evaluation.compare.statistics import mcnemar_exact_p

SIMULATIONS = 2_000
GRID = [(p, d, k) for p in (0.3, 0.6, 0.8) for d in (0.05, 0.1, 0.15) for k in (2, 4)]


def simulated_power(n: int, *, discordance: float, difference: float, alpha: float, seed: int) -> float:
    """The share of ``SIMULATIONS`` simulated comparisons of ``n`` examples the
    exact McNemar test rejects at ``alpha``: its p-value ``min(1, 2·P(Bin(m, ½) ≤ min(f, m − f)))``
    by scipy, vectorised (equal to the product's ``mcnemar_exact_p``: checked on the first 200)."""
    rng = np.random.default_rng(seed)
    discordant = rng.binomial(n, discordance, size=SIMULATIONS)
    fixed = rng.binomial(discordant, (discordance + difference) / (2 * discordance))
    p = np.minimum(1.0, 2 * special.bdtr(np.minimum(fixed, discordant - fixed), discordant, 0.5))
    p[discordant == 0] = 1.0
    for f, m, value in zip(fixed[:200].tolist(), discordant[:200].tolist(), p[:200].tolist(), strict=True):
        assert mcnemar_exact_p(fixed=f, broken=m - f) == pytest.approx(value, rel=1e-9, abs=1e-300)
    return float(np.mean(p <= alpha))


@pytest.mark.parametrize(("accuracy", "difference", "variants"), GRID)
def test_the_planned_sample_size_reaches_the_target_power_in_simulation(
    accuracy: float, difference: float, variants: int
) -> None:
    discordance = independent_discordance(accuracy, difference)
    plan = plan_sample_size(difference=difference, discordance=discordance, variants=variants)
    simulated = simulated_power(
        plan.examples, discordance=discordance, difference=difference, alpha=plan.alpha_per_pair, seed=43
    )
    print(
        f"P={accuracy} D={difference} K={variants}: n={plan.examples} (Connor {plan.connor}), "
        f"exact power {plan.achieved:.3f}, simulated {simulated:.3f}"
    )
    assert abs(simulated - 0.8) <= 0.03
    assert plan.achieved >= 0.8
    # one example fewer does not reach it: the plan is the smallest n the search saw reach it
    below = mcnemar_power(
        plan.examples - 1, discordance=discordance, difference=difference, alpha=plan.alpha_per_pair
    )
    assert below < 0.8
    # Connor's normal approximation is close, and below the exact test's need (it ignores discreteness)
    assert 0.9 * plan.examples <= plan.connor <= 1.02 * plan.examples


def test_the_exact_power_agrees_with_a_direct_sum_over_the_multinomial() -> None:
    # n = 30 is small enough to enumerate every (m, f) outcome by the product's own p-value
    n, q, d, alpha = 30, 0.4, 0.2, 0.05
    from scipy.stats import binom

    direct = sum(
        binom.pmf(m, n, q) * binom.pmf(f, m, (q + d) / (2 * q))
        for m in range(n + 1)
        for f in range(m + 1)
        if mcnemar_exact_p(fixed=f, broken=m - f) <= alpha
    )
    assert mcnemar_power(n, discordance=q, difference=d, alpha=alpha) == pytest.approx(direct, abs=1e-12)


def test_the_detectable_difference_has_the_stated_power() -> None:
    difference = detectable_difference(200, discordant=40)
    assert difference is not None
    assert mcnemar_power(200, discordance=0.2, difference=difference, alpha=0.05) >= 0.8
    assert mcnemar_power(200, discordance=0.2, difference=difference - 0.001, alpha=0.05) < 0.8
    # more examples detect less; none paired detect nothing; one example detects nothing at 80 %
    assert detectable_difference(2000, discordant=400) < difference  # type: ignore[operator]
    assert detectable_difference(0, discordant=0) is None
    assert detectable_difference(3, discordant=0) is None
