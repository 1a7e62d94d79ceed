"""Epoch metrics (pass@k against the formula, majority vote, disagreement,
mean accuracy with its interval), Wilson intervals and the paired bootstrap."""

from __future__ import annotations

import math
from math import comb

import pytest
from scipy import stats

from evaluation.compare.bootstrap import paired_bootstrap
from evaluation.metrics.compute import (
    EpochRow,
    PredictionRow,
    compute_metrics,
    epoch_metrics,
    pass_at_k,
    per_example_means,
)
from evaluation.metrics.intervals import accuracy_text, mean_interval, wilson_interval

#: per example, the correctness of epochs 1..4 (K = 4)
RESULTS = {
    "a": [True, True, True, True],
    "b": [True, False, False, False],
    "c": [False, False, False, False],
    "d": [True, True, False, False],
    "e": [False, True, True, True],
}
K = 4


def rows(results=RESULTS, task_type="qa"):
    return [
        EpochRow(example, task_type, ok, 1.0 if ok else 0.0)
        for example, outcomes in results.items()
        for ok in outcomes
    ]


def chen(n: int, c: int, k: int) -> float:
    """pass@k straight from the formula of Chen et al. (2021)."""
    return 1 - comb(n - c, k) / comb(n, k)


def test_pass_at_k_matches_the_formula_for_k_1_and_k_K():
    m = epoch_metrics(rows(), epochs=K)
    counts = [(len(v), sum(v)) for v in RESULTS.values()]
    for k in (1, K):
        expected = sum(chen(n, c, k) for n, c in counts) / len(counts)
        assert m["pass_at_k"][str(k)] == pytest.approx(expected, abs=1e-12)
    # k = 1 is the mean accuracy; k = K is "some epoch was right"
    assert m["pass_at_k"]["1"] == pytest.approx((4 + 1 + 0 + 2 + 3) / 20)
    assert m["pass_at_k"][str(K)] == pytest.approx(4 / 5)
    assert m["pass_at_k"]["2"] == pytest.approx(sum(chen(n, c, 2) for n, c in counts) / 5)


@pytest.mark.parametrize(("n", "c", "k"), [(10, 3, 1), (10, 3, 5), (50, 7, 10), (200, 1, 100), (6, 6, 6)])
def test_the_stable_product_equals_the_binomial_ratio(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(chen(n, c, k), rel=1e-12, abs=1e-15)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_majority_vote_disagreement_and_mean_accuracy():
    m = epoch_metrics(rows(), epochs=K)
    # a (4/4) and e (3/4) have a majority; d's 2/4 is a tie, not a majority
    assert m["majority_accuracy"] == pytest.approx(2 / 5)
    # b, d and e got different scores in different epochs
    assert (m["disagreeing_examples"], m["disagreement"]) == (3, pytest.approx(3 / 5))
    means = [1.0, 0.25, 0.0, 0.5, 0.75]
    assert m["mean_accuracy"] == pytest.approx(sum(means) / 5)
    low, high = m["mean_accuracy_ci"]
    half = stats.t.ppf(0.975, 4) * stats.tstd(means) / math.sqrt(5)
    assert (low, high) == (pytest.approx(max(0.0, 0.5 - half)), pytest.approx(min(1.0, 0.5 + half)))


def test_unscored_epochs_stay_out_and_task_types_get_their_own_numbers():
    data = rows({"a": [True, False]}, "math") + rows({"b": [True, True]}, "qa")
    data.append(EpochRow("b", "qa", None, None))  # a third epoch of b could not be scored
    m = epoch_metrics(data, epochs=3)
    assert m["per_task_type"]["qa"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": None}
    assert m["per_task_type"]["qa"]["pass_at_k_examples"]["3"] == 0
    assert m["per_task_type"]["math"]["pass_at_k"]["1"] == pytest.approx(0.5)
    assert m["per_task_type"]["math"]["disagreement"] == 1.0
    assert m["pass_at_k"]["2"] == pytest.approx((chen(2, 1, 2) + 1.0) / 2)


def test_compute_metrics_adds_epochs_only_for_runs_with_epochs():
    def prow(example, epoch, ok):
        return PredictionRow(
            "qa", ok, 1, 1, 1, None, "final", 10, example=example, epoch=epoch, score=1.0 if ok else 0.0
        )

    single = compute_metrics([prow("a", 1, True), prow("b", 1, False)])
    assert "epochs" not in single
    two = compute_metrics([prow("a", 1, True), prow("a", 2, False), prow("b", 1, False), prow("b", 2, False)])
    assert two["epochs"]["pass_at_k"] == {"1": 0.25, "2": 0.5}
    assert two["accuracy"] == 0.25 and two["correct"] == 1 and two["scored"] == 4


def test_wilson_interval_matches_the_closed_form():
    interval = wilson_interval(1, 8)
    assert interval is not None
    low, high = interval
    z = stats.norm.ppf(0.975)
    n, p = 8, 1 / 8
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (low, high) == (pytest.approx(centre - half), pytest.approx(centre + half))
    assert wilson_interval(0, 0) is None
    assert accuracy_text(1, 8) == f"12.5% (1/8; 95% CI {low * 100:.1f}–{high * 100:.1f}%)"
    assert accuracy_text(0, 0) == "— (0 scored)"
    with pytest.raises(ValueError):
        wilson_interval(9, 8)


def test_metrics_carry_the_wilson_interval_overall_and_per_task_type():
    m = compute_metrics([PredictionRow("qa", ok, 1, 1, 1, None, "final", 10) for ok in [True] + [False] * 7])
    expected = wilson_interval(1, 8)
    assert expected is not None
    assert m["accuracy_ci"] == pytest.approx(list(expected))
    assert m["per_task_type"]["qa"]["accuracy_ci"] == pytest.approx(list(expected))


def test_mean_interval_needs_two_values():
    assert mean_interval([0.5]) is None
    assert mean_interval([0.5, 0.5]) == (0.5, 0.5)


def test_paired_bootstrap_is_seeded_and_finds_a_real_difference():
    base = {i: 0.0 for i in range(40)}
    candidate = {i: (1.0 if i < 30 else 0.0) for i in range(40)}
    first = paired_bootstrap(base, candidate, seed=7)
    again = paired_bootstrap(base, candidate, seed=7)
    assert first == again
    assert (first.n, first.resamples) == (40, 10_000)
    assert first.difference == pytest.approx(0.75)
    assert first.ci_low > 0.5 and first.ci_high <= 1.0
    assert first.p_value == pytest.approx(1 / 10_001)


def test_paired_bootstrap_of_equal_runs_is_not_significant():
    scores = {i: (i % 3) / 2 for i in range(30)}
    shifted = {i: scores[(i + 1) % 30] for i in range(30)}  # same distribution, paired differently
    result = paired_bootstrap(scores, shifted, seed=1)
    assert result.difference == pytest.approx(0.0)
    assert result.p_value > 0.5
    assert result.ci_low < 0 < result.ci_high


def test_paired_bootstrap_compares_only_shared_examples():
    result = paired_bootstrap({"a": 1.0, "b": 0.0}, {"b": 1.0, "c": 0.0}, resamples=100)
    assert result.n == 1 and result.difference == 1.0
    with pytest.raises(ValueError, match="share no scored example"):
        paired_bootstrap({"a": 1.0}, {"b": 1.0})


def test_per_example_means_average_each_examples_scored_epochs():
    data = [EpochRow("a", "qa", True, 1.0), EpochRow("a", "qa", False, 0.5), EpochRow("b", "qa", None, None)]
    assert per_example_means(data) == {"a": 0.75}
