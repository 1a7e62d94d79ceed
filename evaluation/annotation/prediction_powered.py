"""Judge-corrected accuracy by prediction-powered inference (issue 43;
docs/evaluating.md#judge-corrected-accuracy).

A run's judge (or any automatic scorer) gives a verdict on every prediction;
humans label a uniform random sample of them. Three accuracies follow:

- the **judge's accuracy**: the share of all scored predictions the judge
  called correct — precise, but biased by whatever the judge gets wrong;
- the **human-verified accuracy**: the share of the labelled sample the
  humans called correct — unbiased, but as wide as a sample of n allows;
- the **prediction-powered estimate**: the judge's verdicts on the
  unlabelled predictions, corrected by the judge's error measured on the
  labelled ones (human − judge) — unbiased like the human accuracy, and
  narrower when the judge agrees with the humans.

The estimator is PPI++'s mean (Angelopoulos, Bates, Fannjiang, Jordan &
Zrnic (2023), "Prediction-powered inference", *Science* 382:669–674;
power tuning: Angelopoulos, Duchi & Zrnic (2023), "PPI++: Efficient
prediction-powered inference", arXiv:2311.01453): with ``Y`` the human
verdicts and ``Ŷ`` the judge's on the ``n`` labelled predictions, and
``Ŷᵘ`` the judge's on the ``N`` unlabelled ones::

    θ̂ = λ · mean(Ŷᵘ) + mean(Y − λŶ)
    se² = var(λŶᵘ) / N + var(Y − λŶ) / n        (θ̂ ± z · se)
    λ = cov(Y, Ŷ) / ((1 + n/N) · var(Ŷ ∪ Ŷᵘ)), clipped to [0, 1]

``λ = 1`` is the original PPI estimator, ``λ = 0`` the human accuracy
alone. The run's report uses ``λ = 1``: with λ estimated from the same few
labels, PPI++'s 95 % interval covered the true accuracy 0.915–0.933 of the
time at 30 and 100 labels in our simulation (1,000 runs each;
``tests/evaluation/conformance/test_ppi_reference.py``), PPI's 0.938–0.947;
at 300 labels both cover 0.95. Tuning is there (``lam=None``) for large
samples. The figures are those of the reference implementation,
``ppi_py.ppi_mean_ci`` (the ``ppi-python`` package; the conformance tests
check them against it). It holds when the labelled predictions are a uniform
random sample of the run's: a queue made with ``--filter wrong`` (or
``judged``, ``unscored``, ``disagree``) is not, and is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["PPIEstimate", "ppi_mean"]


@dataclass(frozen=True)
class PPIEstimate:
    """The prediction-powered estimate of a mean (an accuracy, 0..1):
    ``estimate`` with its ``ci_low``/``ci_high`` at ``confidence``, the
    power-tuning weight ``lam`` (0..1), and the counts it rests on:
    ``labelled`` (n, with human verdicts) and ``unlabelled`` (N)."""

    estimate: float
    ci_low: float
    ci_high: float
    lam: float
    labelled: int
    unlabelled: int
    confidence: float


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _variance(values: Sequence[float], *, ddof: int = 0) -> float:
    mean = _mean(values)
    return math.fsum((v - mean) ** 2 for v in values) / (len(values) - ddof)


def _tuned_lambda(human: Sequence[float], judge: Sequence[float], unlabelled: Sequence[float]) -> float:
    """PPI++'s variance-minimising λ for the mean, clipped to [0, 1]
    (Angelopoulos, Duchi & Zrnic 2023, Example 6.1; ``ppi_py``'s
    ``_calc_lam_glm`` at the PPI point estimate)."""
    n, big_n = len(human), len(unlabelled)
    everything = [*judge, *unlabelled]
    spread = _variance(everything, ddof=1)
    if spread == 0:
        return 0.0  # the judge says the same of every prediction: it carries no information
    human_mean, judge_mean = _mean(human), _mean(judge)
    covariance = math.fsum((y - human_mean) * (f - judge_mean) for y, f in zip(human, judge, strict=True)) / n
    return min(1.0, max(0.0, covariance / ((1 + n / big_n) * spread)))


def ppi_mean(
    human: Sequence[float],
    judge: Sequence[float],
    unlabelled: Sequence[float],
    *,
    confidence: float = 0.95,
    lam: float | None = None,
) -> PPIEstimate:
    """The prediction-powered estimate of the mean of the human verdicts
    (see the module docstring): ``human`` and ``judge`` the verdicts (each
    0/1, or a score in [0, 1]) on the same ``n >= 2`` labelled predictions in
    the same order, ``unlabelled`` the judge's on the ``N >= 2`` others;
    ``lam`` ``None`` tunes λ (PPI++), a number fixes it (1: PPI). The
    interval is clipped to [0, 1]. Raises ``ValueError`` for lists of
    different lengths, fewer than two values, or ``confidence`` outside (0, 1)."""
    if len(human) != len(judge):
        raise ValueError(f"{len(human)} human verdicts but {len(judge)} judge verdicts on the labelled set")
    if len(human) < 2 or len(unlabelled) < 2:
        raise ValueError(
            f"prediction-powered inference needs at least 2 labelled and 2 unlabelled predictions, "
            f"got {len(human)} and {len(unlabelled)}"
        )
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    weight = _tuned_lambda(human, judge, unlabelled) if lam is None else lam
    rectifier = [y - weight * f for y, f in zip(human, judge, strict=True)]
    estimate = weight * _mean(unlabelled) + _mean(rectifier)
    se = math.sqrt(
        _variance([weight * f for f in unlabelled]) / len(unlabelled) + _variance(rectifier) / len(human)
    )
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * se
    return PPIEstimate(
        estimate=estimate,
        ci_low=max(0.0, estimate - half),
        ci_high=min(1.0, estimate + half),
        lam=weight,
        labelled=len(human),
        unlabelled=len(unlabelled),
        confidence=confidence,
    )
