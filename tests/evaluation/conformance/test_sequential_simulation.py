"""The sequential rule's type-I error under optional stopping, next to the
naive "stop as soon as p < 0.05" rule's, measured the same way (issue 43).

2,000 null experiments (two variants equally accurate: each paired example
is +1 or −1 with probability q/2 each, 0 otherwise), 600 examples each,
looked at after every batch of 20: the confidence sequence
(``evaluation.experiments.sequential``) rejects when its interval excludes 0
at any look; the naive rule when the exact McNemar p-value is below 0.05 at
any look. Vectorised over the experiments.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from evaluation.compare.statistics import mcnemar_exact_p
from evaluation.experiments.sequential import confidence_sequence, decide

EXPERIMENTS, EXAMPLES, BATCH, ALPHA = 2_000, 600, 20, 0.05


def _null(rng: np.random.Generator, q: float) -> np.ndarray:
    u = rng.random((EXPERIMENTS, EXAMPLES))
    return np.where(u < q / 2, 1.0, np.where(u < q, -1.0, 0.0))


@pytest.mark.parametrize("discordance", [0.1, 0.3, 0.6])
def test_the_confidence_sequence_keeps_alpha_under_optional_stopping_where_the_naive_rule_does_not(
    discordance: float,
) -> None:
    d = _null(np.random.default_rng(43), discordance)
    looks = np.arange(BATCH - 1, EXAMPLES, BATCH)
    cs = confidence_sequence(d, alpha=ALPHA)[:, looks, :]
    sequential = float(np.mean(((cs[..., 0] > 0) | (cs[..., 1] < 0)).any(axis=1)))
    fixed = np.cumsum(d == 1, axis=1)[:, looks]
    broken = np.cumsum(d == -1, axis=1)[:, looks]
    m = fixed + broken
    p = np.where(m > 0, np.minimum(1.0, 2 * special.bdtr(np.minimum(fixed, broken), m, 0.5)), 1.0)
    naive = float(np.mean((p < ALPHA).any(axis=1)))
    # the exact p here is the product's own
    assert p[0, -1] == pytest.approx(mcnemar_exact_p(fixed=int(fixed[0, -1]), broken=int(broken[0, -1])))
    print(
        f"q={discordance}: type-I error under optional stopping ({EXPERIMENTS} null experiments, "
        f"{len(looks)} looks): confidence sequence {sequential:.3f}, naive p<0.05 rule {naive:.3f}"
    )
    assert sequential <= ALPHA
    assert naive > 2 * ALPHA  # the reason for the confidence sequence


def test_a_real_difference_is_decided_and_equal_variants_are_found_equivalent() -> None:
    rng = np.random.default_rng(7)
    better = np.where(rng.random(600) < 0.25, 1.0, np.where(rng.random(600) < 0.05, -1.0, 0.0))
    verdict = decide(better.tolist(), margin=0.05)
    assert verdict.verdict == "different" and verdict.low > 0
    same = np.zeros(2000)
    same[:40], same[40:80] = 1, -1
    rng.shuffle(same)
    assert decide(same.tolist(), margin=0.05).verdict == "equivalent"
    assert decide(same[:30].tolist(), margin=0.05).verdict == "undecided"
    with pytest.raises(ValueError, match="--margin"):
        decide([0.0], margin=0)
