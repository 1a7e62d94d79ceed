"""The window comparison: Newcombe's interval of the difference of two
independent proportions, against statsmodels, and the verdicts."""

from __future__ import annotations

import pytest
from statsmodels.stats.proportion import confint_proportions_2indep

from monitoring.drift import compare_windows, newcombe_independent_interval


@pytest.mark.parametrize(
    ("k1", "n1", "k0", "n0"), [(60, 100, 90, 100), (5, 40, 7, 33), (0, 30, 30, 30), (12, 12, 3, 50)]
)
@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_the_interval_is_statsmodels_newcombe(k1, n1, k0, n0, confidence):
    interval = newcombe_independent_interval(k1, n1, k0, n0, confidence=confidence)
    assert interval is not None
    low, high = interval
    ref_low, ref_high = confint_proportions_2indep(
        k1, n1, k0, n0, method="newcomb", compare="diff", alpha=1 - confidence
    )
    assert (low, high) == pytest.approx((ref_low, ref_high), abs=1e-9)


def test_no_interval_for_an_empty_window():
    assert newcombe_independent_interval(0, 0, 3, 10) is None


def test_a_real_drop_is_flagged():
    result = compare_windows(k1=60, n1=100, k0=90, n0=100, alpha=0.05, min_count=30)
    assert result.verdict == "drop"
    assert result.interval is not None and result.interval[1] < 0
    assert "60/100 (60.0%) vs 90/100 (90.0%)" in result.describe()
    assert "difference -30.0%" in result.describe()


def test_noise_is_not_a_drop():
    # 76 % against 80 %: the interval of the difference holds 0
    result = compare_windows(k1=76, n1=100, k0=80, n0=100, alpha=0.05, min_count=30)
    assert result.verdict == "steady"
    assert result.interval is not None and result.interval[0] < 0 < result.interval[1]


def test_a_rise_is_never_a_drop():
    assert compare_windows(k1=95, n1=100, k0=40, n0=100, alpha=0.05, min_count=30).verdict == "steady"


def test_small_windows_stay_quiet_even_on_a_large_drop():
    # 0 of 10 after 10 of 10 is significant, but under the minimum count nothing is said
    interval = newcombe_independent_interval(0, 10, 10, 10)
    assert interval is not None and interval[1] < 0
    result = compare_windows(k1=0, n1=10, k0=10, n0=10, alpha=0.05, min_count=30)
    assert (result.verdict, result.interval) == ("too few", None)
    assert compare_windows(k1=0, n1=30, k0=10, n0=10, alpha=0.05, min_count=30).verdict == "too few"
