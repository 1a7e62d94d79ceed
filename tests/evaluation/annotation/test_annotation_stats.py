"""The statistics of human review (issue 30), each against a value computed
here, not by the code under test: Cohen's κ and its interval (Cohen 1960;
the asymptotic variance of Fleiss, Cohen & Everitt 1969, written out below),
Fleiss' κ on Fleiss' worked example as Wikipedia tabulates it (κ ≈ 0.210),
and a pairwise preference's win rates and exact sign test."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from evaluation.annotation.agreement import cohen_kappa, confusion_table, fleiss_kappa, pairwise_result
from evaluation.metrics.intervals import wilson_interval

#: judge grade (rows) × human label (columns): correct, partial, incorrect
TABLE = [[20, 5, 0], [10, 15, 3], [1, 2, 9]]


def kappa_by_hand(table: list[list[int]]) -> tuple[float, float]:
    """κ and its standard error, from the formulas."""
    k, n = len(table), sum(map(sum, table))
    p = [[v / n for v in row] for row in table]
    rows = [sum(row) for row in p]
    cols = [sum(p[i][j] for i in range(k)) for j in range(k)]
    observed = sum(p[i][i] for i in range(k))
    chance = sum(rows[i] * cols[i] for i in range(k))
    kappa = (observed - chance) / (1 - chance)
    a = sum(p[i][i] * (1 - (rows[i] + cols[i]) * (1 - kappa)) ** 2 for i in range(k))
    b = (1 - kappa) ** 2 * sum(
        p[i][j] * (cols[i] + rows[j]) ** 2 for i in range(k) for j in range(k) if i != j
    )
    c = (kappa - chance * (1 - kappa)) ** 2
    return kappa, math.sqrt((a + b - c) / (n * (1 - chance) ** 2))


def test_cohens_kappa_and_its_interval_match_the_formulas():
    kappa, se = kappa_by_hand(TABLE)
    assert kappa == pytest.approx((44 / 65 - (25 * 31 + 28 * 22 + 12 * 12) / 65**2) / (1 - 1535 / 65**2))
    z = NormalDist().inv_cdf(0.975)
    got = cohen_kappa(TABLE)
    assert got["kappa"] == pytest.approx(kappa, abs=1e-12) == pytest.approx(0.49257, abs=1e-5)
    assert got["low"] == pytest.approx(kappa - z * se, abs=1e-12)
    assert got["high"] == pytest.approx(kappa + z * se, abs=1e-12)


def test_perfect_agreement_is_one_and_a_single_class_is_undefined():
    assert cohen_kappa([[3, 0], [0, 4]])["kappa"] == pytest.approx(1.0)
    assert cohen_kappa([[5, 0], [0, 0]]) == {"kappa": None, "low": None, "high": None}
    assert cohen_kappa([[1]]) == {"kappa": None, "low": None, "high": None}


def test_the_confusion_table_counts_rows_by_the_first_of_each_pair():
    pairs = [
        ("correct", "correct"),
        ("correct", "incorrect"),
        ("incorrect", "correct"),
        ("correct", "correct"),
    ]
    assert confusion_table(pairs, ["correct", "incorrect"]) == [[2, 1], [1, 0]]
    with pytest.raises(ValueError, match="'maybe' is not one of"):
        confusion_table([("maybe", "correct")], ["correct", "incorrect"])


#: Fleiss (1971) as tabulated in Wikipedia's "Fleiss' kappa" worked example:
#: 10 subjects, 14 raters, 5 categories; κ = 0.210
FLEISS_EXAMPLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_on_the_published_worked_example():
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx(0.210, abs=5e-4)
    # by Fleiss' formulas: P̄ the mean agreement per subject, P̄e the chance agreement
    raters, subjects = 14, len(FLEISS_EXAMPLE)
    p_bar = (
        sum((sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in FLEISS_EXAMPLE) / subjects
    )
    shares = [sum(row[j] for row in FLEISS_EXAMPLE) / (subjects * raters) for j in range(5)]
    p_e = sum(p * p for p in shares)
    assert p_bar == pytest.approx(0.378, abs=5e-4) and p_e == pytest.approx(0.213, abs=5e-4)
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx((p_bar - p_e) / (1 - p_e), abs=1e-12)


def test_fleiss_kappa_refuses_items_with_unequal_raters():
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[2, 1], [1, 1]])
    assert fleiss_kappa([]) is None and fleiss_kappa([[3, 0], [3, 0]]) is None


def test_the_pairwise_win_rate_and_sign_test_on_known_counts():
    result = pairwise_result(15, 5, 5)
    assert (result["n"], result["wins_a"], result["wins_b"], result["ties"]) == (25, 15, 5, 5)
    assert result["win_rate_a"] == pytest.approx(0.6) and result["win_rate_b"] == pytest.approx(0.2)
    assert result["win_rate_a_ci"] == pytest.approx(wilson_interval(15, 25))
    # two-sided exact binomial of 15 of 20 against ½: 2·P(X ≥ 15), X ~ Bin(20, ½)
    expected = 2 * sum(math.comb(20, k) for k in range(15, 21)) / 2**20
    assert result["sign_test_p"] == pytest.approx(expected) == pytest.approx(0.041389, abs=1e-6)
    assert pairwise_result(0, 0, 4)["sign_test_p"] is None
    assert pairwise_result(3, 3, 0)["sign_test_p"] == pytest.approx(1.0)


def test_a_degenerate_table_has_no_kappa_interval_rather_than_nan():
    # the judge said "correct" to all three, the reviewer "incorrect": the
    # asymptotic variance is NaN there, and a NaN would not be JSON
    import json

    from evaluation.annotation.agreement import cohen_kappa

    degenerate = cohen_kappa([[0, 3], [0, 0]])
    assert degenerate == {"kappa": 0.0, "low": None, "high": None}
    json.dumps(degenerate, allow_nan=False)
    real = cohen_kappa([[1, 13], [0, 16]])
    low, kappa, high = real["low"], real["kappa"], real["high"]
    assert low is not None and kappa is not None and high is not None
    assert -1.0 <= low < kappa < high <= 1.0
