"""The paired bootstrap over examples — a pure function for comparing two
runs whose examples were run several times (``run_eval --epochs``).

McNemar's test needs one right/wrong value per example and run; with epochs
each example has a mean score per run instead (``evaluation.metrics.compute
.per_example_means``). The difference of two runs' mean scores is then
judged by resampling the *examples* (paired: an example drawn carries both
runs' values), 10,000 times by default, with a seeded generator so the same
runs always give the same interval and p-value.

Sources: Efron & Tibshirani (1993), "An Introduction to the Bootstrap",
ch. 13 (percentile interval) and §16.4 (a test by resampling under the null,
here the centred differences); Koehn (2004), "Statistical Significance Tests
for Machine Translation Evaluation" (paired bootstrap resampling over test
items); Dror et al. (2018), "The Hitchhiker's Guide to Testing Statistical
Significance in NLP".

numpy is imported when a bootstrap is first computed, not with the module: the
admin's report imports this module at app loading, and numpy costs a tenth of a
second of every ``manage.py`` command's start-up (issue 32).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

__all__ = ["BootstrapResult", "paired_bootstrap"]

K = TypeVar("K", bound=Hashable)

#: Resamples when the caller names none.
RESAMPLES = 10_000
#: The generator's seed when the caller names none.
SEED = 0


@dataclass(frozen=True)
class BootstrapResult:
    """A paired bootstrap of ``candidate - base`` over ``n`` examples.

    ``base_mean`` / ``candidate_mean``: the runs' mean per-example scores
    over the shared examples; ``difference``: candidate minus base;
    ``ci_low`` / ``ci_high``: the percentile interval of the difference at
    ``confidence``; ``p_value``: two-sided, the share of resampled
    differences, centred on 0, at least as far from 0 as the observed one
    (with the +1 correction of Davison & Hinkley 1997, eq. 4.11, so never 0);
    ``resamples``, ``seed``: as asked."""

    n: int
    base_mean: float
    candidate_mean: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    confidence: float
    resamples: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _order(key: Hashable) -> tuple[int, Any]:
    """Keys in a fixed order, so the same runs give the same resamples:
    whole numbers (database ids) in numeric order, anything else by its repr."""
    return (0, key) if isinstance(key, int) and not isinstance(key, bool) else (1, repr(key))


def paired_bootstrap(
    base: Mapping[K, float],
    candidate: Mapping[K, float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Paired bootstrap over the examples both runs scored.

    ``base`` and ``candidate`` map an example key to that run's mean score on
    it (e.g. over its epochs); only keys in both are compared. Each resample
    draws ``n`` examples with replacement (``numpy.random.default_rng(seed)``)
    and takes the mean difference. Raises ``ValueError`` when no example is
    shared, ``resamples < 1`` or ``confidence`` is not in (0, 1)."""
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    keys = sorted((k for k in base if k in candidate), key=_order)
    if not keys:
        raise ValueError("the two runs share no scored example to compare")
    import numpy as np  # deferred: see the module docstring

    a = np.array([float(base[k]) for k in keys])
    b = np.array([float(candidate[k]) for k in keys])
    diffs = b - a
    observed = float(diffs.mean())
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(keys), size=(resamples, len(keys)))
    sampled = diffs[picks].mean(axis=1)
    alpha = 1 - confidence
    low, high = np.quantile(sampled, [alpha / 2, 1 - alpha / 2])
    # under the null the differences are centred on 0: how often is a
    # centred resample at least as extreme as what was observed?
    centred = sampled - observed
    extreme = int(np.count_nonzero(np.abs(centred) >= abs(observed) - 1e-12))
    return BootstrapResult(
        n=len(keys),
        base_mean=float(a.mean()),
        candidate_mean=float(b.mean()),
        difference=observed,
        ci_low=float(low),
        ci_high=float(high),
        p_value=(extreme + 1) / (resamples + 1),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )
