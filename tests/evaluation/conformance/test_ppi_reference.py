"""The judge-corrected accuracy (``evaluation.annotation.prediction_powered``)
against the reference implementation of prediction-powered inference,
``ppi_py`` (the ``ppi-python`` package, a test-only dependency), on generated
data, and its 95 % interval's coverage in simulation (issue 43).

The generated runs: true correctness ``Y ~ Bernoulli(θ)``; a judge that
calls a right answer wrong with probability ``fn`` and a wrong one right
with probability ``fp`` (so its accuracy is biased); a uniform random sample
of ``n`` predictions labelled by humans, the other ``N`` judged only.
"""

from __future__ import annotations

import numpy as np
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate

from evaluation.annotation.prediction_powered import ppi_mean

REPLICATIONS = 1_000


def _run(rng: np.random.Generator, *, n: int, big_n: int, theta: float, fn: float, fp: float):
    truth = rng.random(n + big_n) < theta
    flip = np.where(truth, rng.random(n + big_n) < fn, rng.random(n + big_n) < fp)
    judge = (truth ^ flip).astype(float)
    return truth[:n].astype(float), judge[:n], judge[n:]


@pytest.mark.parametrize(
    ("n", "big_n", "theta", "fn", "fp", "seed"),
    [(30, 170, 0.7, 0.1, 0.2, 1), (100, 900, 0.55, 0.05, 0.3, 2), (300, 3000, 0.9, 0.02, 0.5, 3)],
)
def test_the_estimate_and_interval_equal_ppi_py(
    n: int, big_n: int, theta: float, fn: float, fp: float, seed: int
) -> None:
    human, judge, unlabelled = _run(np.random.default_rng(seed), n=n, big_n=big_n, theta=theta, fn=fn, fp=fp)
    ours = ppi_mean(human.tolist(), judge.tolist(), unlabelled.tolist())
    low, high = ppi_mean_ci(human, judge, unlabelled, alpha=0.05)
    point = ppi_mean_pointestimate(human, judge, unlabelled)
    assert ours.estimate == pytest.approx(float(np.squeeze(point)), abs=1e-12)
    assert ours.ci_low > 0 and ours.ci_high < 1  # not clipped here, so comparable
    assert ours.ci_low == pytest.approx(float(np.squeeze(low)), abs=1e-12)
    assert ours.ci_high == pytest.approx(float(np.squeeze(high)), abs=1e-12)
    # λ = 1 is the original PPI estimator of the Science paper
    classic = ppi_mean(human.tolist(), judge.tolist(), unlabelled.tolist(), lam=1.0)
    low1, high1 = ppi_mean_ci(human, judge, unlabelled, alpha=0.05, lam=1.0)
    assert classic.ci_low == pytest.approx(float(np.squeeze(low1)), abs=1e-12)
    assert classic.ci_high == pytest.approx(float(np.squeeze(high1)), abs=1e-12)
    assert classic.estimate == pytest.approx(unlabelled.mean() + (human - judge).mean(), abs=1e-12)


def _coverage(*, n: int, big_n: int, lam: float | None, seed: int) -> tuple[float, float, float]:
    """Coverage of the 95 % interval of θ = 0.65 over ``REPLICATIONS`` generated runs, its mean
    width, and the mean width of the human-only (Wald) interval on the same labels."""
    rng = np.random.default_rng(seed)
    theta, covered, widths, human_widths = 0.65, 0, [], []
    for _ in range(REPLICATIONS):
        human, judge, unlabelled = _run(rng, n=n, big_n=big_n, theta=theta, fn=0.08, fp=0.25)
        estimate = ppi_mean(human.tolist(), judge.tolist(), unlabelled.tolist(), lam=lam)
        covered += estimate.ci_low <= theta <= estimate.ci_high
        widths.append(estimate.ci_high - estimate.ci_low)
        human_widths.append(2 * 1.96 * human.std() / np.sqrt(len(human)))
    return covered / REPLICATIONS, float(np.mean(widths)), float(np.mean(human_widths))


@pytest.mark.parametrize(("n", "big_n"), [(30, 270), (100, 900)])
def test_the_reports_95_percent_interval_covers_the_true_accuracy_at_93_to_97_percent(
    n: int, big_n: int
) -> None:
    # λ = 1, as the run's report computes it (evaluation.annotation.corrected)
    coverage, width, human_width = _coverage(n=n, big_n=big_n, lam=1.0, seed=43)
    print(
        f"PPI coverage {coverage:.3f} ({REPLICATIONS} runs, n={n}, N={big_n}); "
        f"width {width:.3f} vs human {human_width:.3f}"
    )
    assert 0.93 <= coverage <= 0.97
    assert width < human_width  # the judge's verdicts narrow the interval


def test_tuned_lambda_covers_at_300_labels() -> None:
    # PPI++'s estimated λ needs more labels to be valid (below 0.93 at 30–100 labels: see the module)
    coverage, width, human_width = _coverage(n=300, big_n=2700, lam=None, seed=43)
    print(
        f"PPI++ coverage {coverage:.3f} ({REPLICATIONS} runs, n=300, N=2700); "
        f"width {width:.3f} vs human {human_width:.3f}"
    )
    assert 0.93 <= coverage <= 0.97
    assert width < human_width


def test_a_biased_judge_is_corrected() -> None:
    # the judge's accuracy is off by +0.15 (it calls many wrong answers right); the correction is not
    rng = np.random.default_rng(7)
    human, judge, unlabelled = _run(rng, n=400, big_n=20_000, theta=0.5, fn=0.0, fp=0.3)
    estimate = ppi_mean(human.tolist(), judge.tolist(), unlabelled.tolist())
    assert unlabelled.mean() == pytest.approx(0.65, abs=0.02)
    assert estimate.ci_low <= 0.5 <= estimate.ci_high


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="2 human verdicts but 3"):
        ppi_mean([1, 0], [1, 0, 1], [1, 1])
    with pytest.raises(ValueError, match="at least 2 labelled"):
        ppi_mean([1], [1], [1, 0])
