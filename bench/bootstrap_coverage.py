"""Coverage of the interval a comparison of runs with epochs (or partial
credit) gives for the candidate − base difference: a simulation.

Each simulated dataset draws ``n`` examples from a population of example
kinds (always right in both runs, always wrong, fixed by the candidate,
broken by it, noisy in both), runs each example ``K`` epochs in each run,
and reduces an example to its mean over its epochs — what
``evaluation.compare.over_epochs`` compares. The population's true mean
difference is known, so the share of datasets whose 95 % interval covers it
is the interval's coverage. Two intervals, from the product's own code:

- ``percentile bootstrap``: the paired bootstrap's percentile interval
  (``evaluation.compare.bootstrap.paired_bootstrap``), what comparisons of
  runs with epochs used before;
- ``AgentLab now``: ``evaluation.compare.over_epochs.paired_mean_figures`` —
  Newcombe's interval when every example's epochs agree, else Agresti and
  Min's adjusted interval.

    python bench/bootstrap_coverage.py [--datasets 500] [--resamples 2000]

Prints one row per scenario: coverage and mean width of each interval.
A coverage within about ±0.02 of 0.95 (two standard errors at 500
datasets) is nominal; below that the interval is too short.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluation.compare import over_epochs  # noqa: E402
from evaluation.compare.bootstrap import paired_bootstrap  # noqa: E402

#: name → (examples, epochs, [(share, p right in base, p right in candidate)])
SCENARIOS: dict[str, tuple[int, int, list[tuple[float, float, float]]]] = {
    "few discordant, epochs agree, n=100": (100, 3, [(0.60, 1, 1), (0.32, 0, 0), (0.05, 0, 1), (0.03, 1, 0)]),
    "few discordant, some noisy, n=100": (
        100,
        3,
        [(0.55, 1, 1), (0.30, 0, 0), (0.07, 0.5, 0.5), (0.05, 0, 1), (0.03, 1, 0)],
    ),
    "no difference, few discordant, n=100, K=5": (
        100,
        5,
        [(0.60, 1, 1), (0.30, 0, 0), (0.05, 0.5, 0.5), (0.025, 0, 1), (0.025, 1, 0)],
    ),
    "few discordant, epochs agree, n=30": (30, 3, [(0.60, 1, 1), (0.30, 0, 0), (0.06, 0, 1), (0.04, 1, 0)]),
    "few discordant, some noisy, n=30": (
        30,
        3,
        [(0.55, 1, 1), (0.25, 0, 0), (0.10, 0.5, 0.5), (0.06, 0, 1), (0.04, 1, 0)],
    ),
    "many noisy, n=100": (100, 3, [(0.3, 1, 1), (0.2, 0, 0), (0.3, 0.4, 0.6), (0.2, 0.7, 0.5)]),
    "large effect, noisy, n=50": (50, 3, [(0.3, 0.2, 0.8), (0.3, 0.5, 0.9), (0.4, 0.9, 0.9)]),
}


def _draw(
    rng: np.random.Generator, n: int, epochs: int, kinds: list[tuple[float, float, float]]
) -> tuple[np.ndarray, np.ndarray]:
    shares = np.array([k[0] for k in kinds])
    picked = rng.choice(len(kinds), size=n, p=shares / shares.sum())
    p_base = np.array([kinds[i][1] for i in picked])
    p_candidate = np.array([kinds[i][2] for i in picked])
    return rng.binomial(epochs, p_base) / epochs, rng.binomial(epochs, p_candidate) / epochs


def _truth(kinds: list[tuple[float, float, float]]) -> float:
    total = sum(k[0] for k in kinds)
    return sum(share * (candidate - base) for share, base, candidate in kinds) / total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=int, default=500, help="simulated datasets per scenario")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per dataset")
    args = parser.parse_args(argv)
    over_epochs.RESAMPLES = args.resamples  # the p-value's resamples; the interval does not use them
    started = time.perf_counter()
    print(f"{'scenario':44} {'true':>6}  {'percentile bootstrap':>22}  {'AgentLab now':>22}")
    print(f"{'':44} {'':>6}  {'coverage':>10} {'width':>11}  {'coverage':>10} {'width':>11}")
    for name, (n, epochs, kinds) in SCENARIOS.items():
        rng = np.random.default_rng(1)
        truth = _truth(kinds)
        covered = {"before": 0, "now": 0}
        width = {"before": 0.0, "now": 0.0}
        for _ in range(args.datasets):
            base, candidate = _draw(rng, n, epochs, kinds)
            b, c = dict(enumerate(base.tolist())), dict(enumerate(candidate.tolist()))
            before = paired_bootstrap(b, c, resamples=args.resamples)
            now = over_epochs.paired_mean_figures(b, c, confidence=0.95)
            for key, (low, high) in (
                ("before", (before.ci_low, before.ci_high)),
                ("now", (now["ci_low"], now["ci_high"])),
            ):
                assert low is not None and high is not None
                covered[key] += low - 1e-12 <= truth <= high + 1e-12
                width[key] += high - low
        d = args.datasets
        print(
            f"{name:44} {truth:>6.3f}  {covered['before'] / d:>10.3f} {width['before'] / d:>11.3f}"
            f"  {covered['now'] / d:>10.3f} {width['now'] / d:>11.3f}",
            flush=True,
        )
    print(f"{args.datasets} datasets per scenario, nominal 0.95; {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
