"""The comparison's statistics against published worked examples.

- Cavo et al. (2012), complete response before and after consolidation
  therapy, the worked example of Fagerland, Lydersen & Laake (2017),
  *Statistical Analysis of Contingency Tables*, chapter 8: the 2×2 table
  ``[[59, 6], [16, 80]]``, n = 161, difference −0.0621; Newcombe's
  square-and-add interval (Newcombe 1998 method 10) −0.1186 to −0.0046; the
  exact conditional McNemar test P = 0.052479.
- Newcombe (1998), Statistics in Medicine 17:857–872, Table I (single
  proportions, Wilson score interval): 81/263 → 0.2553 to 0.3662; 15/148 →
  0.0624 to 0.1605; 0/20 → 0 to 0.1611; 1/29 → 0.0061 to 0.1718.
"""

from __future__ import annotations

import math

import pytest

from evaluation.compare.statistics import (
    PairedTable,
    holm_adjust,
    mcnemar_exact_p,
    newcombe_paired_interval,
    wilson_interval,
)

#: Cavo 2012 in the comparison's terms: the candidate is the first
#: measurement (59 + 6 = 65 right), the base the second (59 + 16 = 75 right).
CAVO = PairedTable(both_right=59, fixed=6, broken=16, both_wrong=80)


def interval(table: PairedTable, confidence: float = 0.95) -> tuple[float, float]:
    found = newcombe_paired_interval(table, confidence=confidence)
    assert found is not None
    return found


def test_newcombe_interval_equals_the_published_cavo_example():
    low, high = interval(CAVO)
    assert (CAVO.fixed - CAVO.broken) / CAVO.n == pytest.approx(-0.0621, abs=5e-5)
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)


def test_newcombe_interval_swaps_sign_when_base_and_candidate_swap():
    swapped = PairedTable(both_right=59, fixed=16, broken=6, both_wrong=80)
    low, high = interval(swapped)
    assert (round(low, 4), round(high, 4)) == (0.0046, 0.1186)


def test_exact_mcnemar_equals_the_published_cavo_example():
    assert round(mcnemar_exact_p(fixed=6, broken=16), 6) == 0.052479
    assert mcnemar_exact_p(fixed=16, broken=6) == mcnemar_exact_p(fixed=6, broken=16)


def test_exact_mcnemar_is_the_binomial_tail_of_the_discordant_pairs():
    # all 10 discordant pairs one way: 2 · (1/2)^10
    assert mcnemar_exact_p(fixed=0, broken=10) == pytest.approx(2 / 1024, rel=1e-12)
    # 1 of 3 discordant pairs: the two tails cover every outcome
    assert mcnemar_exact_p(fixed=1, broken=2) == pytest.approx(1.0)
    assert mcnemar_exact_p(fixed=0, broken=0) == 1.0


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_interval_equals_newcombes_table_one(k, n, low, high):
    found = wilson_interval(k, n)
    assert found is not None
    assert (round(found[0], 4), round(found[1], 4)) == (low, high)


def test_wilson_interval_of_nothing_is_none_and_bad_counts_are_refused():
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="between 0 and n"):
        wilson_interval(5, 3)


def test_newcombe_interval_without_discordant_pairs_contains_zero_and_stays_in_range():
    low, high = interval(PairedTable(both_right=10, fixed=0, broken=0, both_wrong=0))
    assert low < 0 <= high <= 1
    low, high = interval(PairedTable(both_right=0, fixed=0, broken=12, both_wrong=0))
    assert -1 <= low < high < 0
    assert newcombe_paired_interval(PairedTable(0, 0, 0, 0)) is None


def test_newcombe_interval_is_wider_at_a_higher_confidence():
    low95, high95 = interval(CAVO)
    low99, high99 = interval(CAVO, confidence=0.99)
    assert low99 < low95 and high99 > high95


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="broken"):
        PairedTable(both_right=1, fixed=0, broken=-1, both_wrong=0)


def test_holm_adjusts_step_down_in_input_order():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, max(0.06, 0.04·1) = 0.06
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_skips_missing_tests():
    adjusted = holm_adjust([0.5, None, 0.6])
    assert adjusted[1] is None
    assert adjusted[0] == pytest.approx(1.0) and adjusted[2] == pytest.approx(1.0)
    assert holm_adjust([0.04]) == [0.04]
    assert holm_adjust([]) == []


def test_holm_never_lowers_a_p_value_and_keeps_the_order():
    p = [0.001, 0.2, 0.013, 0.049, 0.7]
    adjusted = holm_adjust(p)
    assert all(a is not None and a >= raw for a, raw in zip(adjusted, p, strict=True))
    order = sorted(range(len(p)), key=p.__getitem__)
    values = [adjusted[i] for i in order]
    assert values == sorted(values)  # type: ignore[type-var]
    assert not any(math.isnan(a) for a in values if a is not None)
