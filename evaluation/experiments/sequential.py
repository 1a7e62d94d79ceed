"""Stopping an experiment early, validly: a confidence sequence for the paired
difference in accuracy of two variants (issue 43; docs/comparing.md#stopping-early).

A p-value looked at after every batch, with the experiment stopped as soon as
it dips below 0.05, rejects a true null far more often than 5 % of the time
(the conformance test measures it). A **confidence sequence** is a sequence
of intervals that holds at every time at once: ``P(∃t: μ ∉ C_t) ≤ α``, so it
may be looked at after every batch and the experiment stopped whenever it
decides (Howard, Ramdas, McAuliffe & Sekhon (2021), "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Annals of Statistics
49:1055–1080).

The construction is the **predictable plug-in empirical-Bernstein**
confidence sequence of Waudby-Smith & Ramdas (2023), "Estimating means of
bounded random variables by betting", JRSS B 86:1–27, Theorem 2, for
observations in [0, 1]: a paired difference ``d`` ∈ {−1, 0, 1} (or a mean
over epochs in [−1, 1]) becomes ``y = (d + 1) / 2``, and with

    μ̂_t = (½ + Σ_{i≤t} y_i) / (t + 1),   σ̂²_t = (¼ + Σ_{i≤t} (y_i − μ̂_i)²) / (t + 1),
    λ_t = min(sqrt(2 log(2/α) / (σ̂²_{t−1} · t · log(1 + t))), ½),
    ψ(λ) = (−log(1 − λ) − λ) / 4,   v_i = 4 (y_i − μ̂_{i−1})²,

the interval at time t is
``Σλ_i y_i / Σλ_i ± (log(2/α) + Σ v_i ψ(λ_i)) / Σλ_i``, mapped back to the
difference's scale (``2y − 1``) and intersected with the earlier ones
(the intersection of a confidence sequence's intervals is one too).

A pair is **decided** when its interval excludes 0 (one variant is better)
or lies inside ``(−margin, margin)`` (they are equivalent within the margin).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Decision", "confidence_sequence", "decide"]


def confidence_sequence(differences: Sequence[float] | np.ndarray, *, alpha: float = 0.05) -> np.ndarray:
    """The running confidence sequence of the mean paired difference: an
    array of shape ``(..., t, 2)`` of ``(low, high)`` after each of the ``t``
    differences along the last axis of ``differences`` (each in [−1, 1];
    several sequences at once along the leading axes), at time-uniform level
    ``alpha`` (see the module docstring; intervals already intersected).
    Raises ``ValueError`` for a difference outside [−1, 1] or ``alpha``
    outside (0, 1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    d = np.asarray(differences, dtype=np.float64)
    if d.size and (d.min() < -1 or d.max() > 1):
        raise ValueError("a paired difference must be in [-1, 1]")
    y = (d + 1) / 2
    t = np.arange(1, y.shape[-1] + 1, dtype=np.float64)
    mu_hat = (0.5 + np.cumsum(y, axis=-1)) / (t + 1)
    sigma2 = (0.25 + np.cumsum((y - mu_hat) ** 2, axis=-1)) / (t + 1)
    ones = np.ones((*y.shape[:-1], 1))
    prior_sigma2 = np.concatenate([0.25 * ones, sigma2[..., :-1]], axis=-1)
    prior_mu = np.concatenate([0.5 * ones, mu_hat[..., :-1]], axis=-1)
    log_term = math.log(2 / alpha)
    lam = np.minimum(np.sqrt(2 * log_term / (prior_sigma2 * t * np.log1p(t))), 0.5)
    psi = (-np.log1p(-lam) - lam) / 4
    v = 4 * (y - prior_mu) ** 2
    weights = np.cumsum(lam, axis=-1)
    centre = np.cumsum(lam * y, axis=-1) / weights
    radius = (log_term + np.cumsum(v * psi, axis=-1)) / weights
    low = np.maximum.accumulate(np.clip(centre - radius, 0, 1), axis=-1)
    high = np.minimum.accumulate(np.clip(centre + radius, 0, 1), axis=-1)
    return np.stack([2 * low - 1, 2 * high - 1], axis=-1)


@dataclass(frozen=True)
class Decision:
    """Where a pair's confidence sequence stands after ``examples`` paired
    examples: ``low``/``high`` (the difference's interval), and ``verdict``
    — ``"different"`` (excludes 0), ``"equivalent"`` (inside ±margin) or
    ``"undecided"``."""

    examples: int
    low: float
    high: float
    verdict: str

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided"


def decide(differences: Sequence[float], *, alpha: float = 0.05, margin: float = 0.05) -> Decision:
    """The :class:`Decision` of a pair after ``differences`` (candidate −
    base per paired example, in example order). Raises ``ValueError`` for a
    ``margin`` outside (0, 1) and as :func:`confidence_sequence`."""
    if not 0 < margin < 1:
        raise ValueError(f"--margin must be a number in (0, 1), got {margin}")
    if len(differences) == 0:
        return Decision(0, -1.0, 1.0, "undecided")
    low, high = (float(v) for v in confidence_sequence(differences, alpha=alpha)[-1])
    if low > 0 or high < 0:
        verdict = "different"
    elif -margin < low and high < margin:
        verdict = "equivalent"
    else:
        verdict = "undecided"
    return Decision(len(differences), low, high, verdict)
