"""Power of the paired comparison: how many examples a comparison needs, and
the smallest difference a comparison of given counts could have detected
(issue 43; docs/comparing.md#how-many-examples).

The test is the comparison's own: the two-sided **exact McNemar test**
(``evaluation.compare.statistics.mcnemar_exact_p``; reject when its p-value
is at most ``alpha``). Its power is computed exactly, not by the normal
approximation: with ``n`` paired examples, a discordance ``q`` (the share of
examples the two runs disagree on) and a difference ``d`` (candidate −
base accuracy), the number of discordant examples ``m`` is Binomial(n, q)
and, given ``m``, the number the candidate fixed is Binomial(m, π) with
π = (q + d) / 2q; the power is

    Σ_m  P(M = m) · P(F ≤ c_m or F ≥ m − c_m | m),

``c_m`` the largest count whose two-sided exact p-value is at most
``alpha`` (the unconditional power of the conditional exact test:
Fagerland, Lydersen & Laake (2013), BMC Med. Res. Methodol. 13:91, §"Power";
Duffy (1984), Biometrics 40:1005–1015). The binomial probabilities are
scipy's (``scipy.special.bdtr``), summed over every ``m``.

Several variants: an experiment of ``K`` variants compares ``K(K−1)/2``
pairs with Holm's adjustment; a pair's planned power uses ``alpha / pairs``,
the level Holm's first (strictest) step tests at, so the plan holds for
whichever pair is tested first (a conservative plan for the later steps).

The published approximation the plan is checked against is Connor's (1987)
normal formula for McNemar's test (Biometrics 43:207–211)::

    n = [ z_{1−α/2} · sqrt(q) + z_{1−β} · sqrt(q − d²) ]² / d²

Pure functions over numbers (no Django); scipy is imported here only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from scipy import special

from evaluation.compare.shapes import Detectable

__all__ = [
    "DEFAULT_POWER",
    "Plan",
    "connor_sample_size",
    "detectable_difference",
    "detectable_summary",
    "independent_discordance",
    "mcnemar_power",
    "plan_sample_size",
]

#: The power a smallest detectable difference is stated at.
DEFAULT_POWER = 0.8
#: Above this many examples the plan gives up (a difference too small to plan for).
MAX_EXAMPLES = 1_000_000


def _check_unit(name: str, value: float, *, closed_high: bool = False) -> None:
    high_ok = value <= 1 if closed_high else value < 1
    if not (value > 0 and high_ok) or math.isnan(value):
        interval = "(0, 1]" if closed_high else "(0, 1)"
        raise ValueError(f"{name} must be in {interval}, got {value}")


def _critical_counts(m: np.ndarray, alpha: float) -> np.ndarray:
    """Per discordant count ``m``: the largest ``c`` with the two-sided exact
    McNemar p-value ``2·P(Bin(m, ½) ≤ c)`` at most ``alpha`` (−1: none)."""
    c = m // 2
    # the lower tail is increasing in c: step down from m/2 by bisection on each m at once
    low = np.full_like(c, -1)
    high = c.copy()
    while True:
        active = high > low
        if not active.any():
            break
        mid = (low + high + 1) // 2
        ok = 2 * special.bdtr(mid, m, 0.5) <= alpha * (1 + 1e-12)
        low = np.where(active & ok, mid, low)
        high = np.where(active & ~ok, mid - 1, high)
    return low


def mcnemar_power(n: int, *, discordance: float, difference: float, alpha: float = 0.05) -> float:
    """The exact power (0..1) of the two-sided exact McNemar test at level
    ``alpha`` with ``n`` paired examples, a discordance ``q`` (share of
    examples the runs disagree on, ``|difference| <= q <= 1``) and a true
    paired difference ``difference`` (candidate − base accuracy, in
    [−1, 1]); see the module docstring. Raises ``ValueError`` for
    ``n < 1``, ``alpha`` outside (0, 1) or a discordance below ``|difference|``."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    _check_unit("alpha", alpha)
    d = abs(difference)
    if not d <= discordance <= 1 or discordance <= 0:
        raise ValueError(f"the discordance must be in [|difference|, 1] and > 0, got {discordance} for {d}")
    m = np.arange(n + 1, dtype=np.int64)
    weights = np.exp(
        special.gammaln(n + 1) - special.gammaln(m + 1) - special.gammaln(n - m + 1)
        + special.xlogy(m, discordance) + special.xlog1py(n - m, -discordance)
    )  # fmt: skip
    pi = (discordance + d) / (2 * discordance)
    c = _critical_counts(m, alpha)
    has = c >= 0
    cc = np.where(has, c, 0)
    # P(F <= c) + P(F >= m − c) with F ~ Bin(m, π); the tails never overlap (c < m/2)
    lower = np.where(has, special.bdtr(cc, m, pi), 0.0)
    upper = np.where(has, special.bdtrc(m - cc - 1, m, pi), 0.0)
    power = float(np.sum(weights * (lower + upper)))
    return min(1.0, max(0.0, power))


def independent_discordance(base_accuracy: float, difference: float) -> float:
    """The discordance of two runs whose errors are independent: with
    ``p1`` the base's and ``p2 = p1 + difference`` the candidate's accuracy
    (``p1 − difference`` when that would pass 1), ``p1(1 − p2) + p2(1 − p1)``.
    Real runs of one agent agree more than that, so it plans for more
    examples than they need (the cautious default of ``plan_eval``)."""
    p2 = base_accuracy + difference
    if p2 > 1:
        p2 = base_accuracy - difference
    return base_accuracy * (1 - p2) + p2 * (1 - base_accuracy)


def connor_sample_size(*, discordance: float, difference: float, alpha: float, power: float) -> int:
    """Connor's (1987) normal-approximation sample size for McNemar's test
    (Biometrics 43:207–211), rounded up: the published formula the exact plan
    is checked against (see the module docstring)."""
    z_a = NormalDist().inv_cdf(1 - alpha / 2)
    z_b = NormalDist().inv_cdf(power)
    d = abs(difference)
    root = z_a * math.sqrt(discordance) + z_b * math.sqrt(discordance - d * d)
    return math.ceil(root * root / (d * d))


@dataclass(frozen=True)
class Plan:
    """A sample-size plan: ``examples`` paired examples reach ``achieved``
    power (>= ``power``) for a difference ``difference`` at a discordance
    ``discordance``, each pair tested at ``alpha_per_pair`` (``alpha`` over
    ``pairs`` pairs, Holm's first step); ``connor``: Connor's (1987)
    approximate sample size for the same, for comparison."""

    examples: int
    achieved: float
    difference: float
    discordance: float
    alpha: float
    alpha_per_pair: float
    pairs: int
    power: float
    connor: int


def plan_sample_size(
    *,
    difference: float,
    discordance: float,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    variants: int = 2,
) -> Plan:
    """The smallest number of paired examples whose exact McNemar power
    (:func:`mcnemar_power`) reaches ``power`` for ``difference`` at
    ``alpha / (variants·(variants−1)/2)``. Power is not monotone in ``n``
    for an exact test (the saw-tooth of discrete tests): the answer is the
    first ``n`` from which a bisection over ``n`` finds the target reached.
    Raises ``ValueError`` for a difference outside (0, 1), a discordance
    below it or above 1, ``alpha``/``power`` outside (0, 1), fewer than 2
    variants, or a plan over :data:`MAX_EXAMPLES` examples."""
    _check_unit("the difference to detect", difference)
    _check_unit("the discordance", discordance, closed_high=True)
    _check_unit("alpha", alpha)
    _check_unit("the power", power)
    if discordance < difference:
        raise ValueError(
            f"the discordance ({discordance}) is below the difference to detect ({difference}): two runs "
            "that differ by d disagree on at least a share d of the examples"
        )
    if variants < 2:
        raise ValueError(f"a comparison needs at least 2 variants, got {variants}")
    pairs = variants * (variants - 1) // 2
    level = alpha / pairs

    def reaches(n: int) -> bool:
        return mcnemar_power(n, discordance=discordance, difference=difference, alpha=level) >= power

    high = 8
    while not reaches(high):
        if high > MAX_EXAMPLES:
            raise ValueError(f"a difference of {difference} needs over {MAX_EXAMPLES:,} examples")
        high *= 2
    low = high // 2  # does not reach (or is below the first tried)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    achieved = mcnemar_power(high, discordance=discordance, difference=difference, alpha=level)
    connor = connor_sample_size(discordance=discordance, difference=difference, alpha=level, power=power)
    return Plan(high, achieved, difference, discordance, alpha, level, pairs, power, connor)


def detectable_difference(
    examples: int,
    *,
    discordant: int,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    pairs: int = 1,
) -> float | None:
    """The smallest difference (0..1, either sign: ``±`` this) a comparison
    of ``examples`` paired examples with ``discordant`` of them discordant
    could have detected with probability ``power`` by the exact McNemar
    test at ``alpha / pairs`` (Holm's first step over ``pairs`` pairs).

    The discordance is the observed one, raised to the difference where it
    is smaller (a difference ``d`` needs a share ``d`` of discordant
    examples). ``None`` when no difference up to 1 reaches the power (too
    few examples) or ``examples == 0``. Found by bisection to 0.0001."""
    if examples <= 0:
        return None
    if not 0 <= discordant <= examples:
        raise ValueError(f"discordant must be in [0, {examples}], got {discordant}")
    observed = discordant / examples
    level = alpha / max(1, pairs)

    def power_at(d: float) -> float:
        return mcnemar_power(examples, discordance=max(observed, d), difference=d, alpha=level)

    if power_at(1.0) < power:
        return None
    low, high = 0.0, 1.0
    while high - low > 1e-4:
        mid = (low + high) / 2
        low, high = (low, mid) if power_at(mid) >= power else (mid, high)
    return high


def detectable_summary(
    *,
    examples: int,
    fixed: int,
    broken: int,
    p_value: float | None,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    pairs: int = 1,
) -> Detectable:
    """The ``Detectable`` of a paired comparison (``examples`` paired,
    ``fixed`` + ``broken`` of them discordant, its ``p_value``): the
    :func:`detectable_difference` and a sentence such as ``"not significant
    (p = 0.41); this comparison could detect ±6.1 pp at 80 % power"``."""
    difference = detectable_difference(
        examples, discordant=fixed + broken, alpha=alpha, power=power, pairs=pairs
    )
    level = f"alpha {alpha:g}" + (f" over {pairs} pairs (Holm)" if pairs > 1 else "")
    if p_value is None:
        verdict = "nothing compared"
    elif p_value < alpha:
        verdict = f"significant (p = {p_value:.2g} < {level})"
    else:
        verdict = f"not significant (p = {p_value:.2g}, {level})"
    if examples == 0:
        reach = "no paired example: no difference could be detected"
    elif difference is None:
        reach = f"{examples} examples are too few to detect any difference with {power:.0%} power"
    else:
        reach = f"this comparison could detect ±{difference * 100:.1f} pp with {power:.0%} power"
    return {
        "difference": difference,
        "examples": examples,
        "discordant": fixed + broken,
        "power": power,
        "alpha": alpha,
        "note": f"{verdict}; {reach}",
    }
