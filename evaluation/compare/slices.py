"""Where a candidate regresses: the paired difference tested in every slice of
the examples, with the false discovery rate controlled (issue 43;
docs/comparing.md#regression-slices). Pure functions over plain values.

A **slice** is the paired examples sharing one value of a feature (task
type, a metadata key with at most :data:`MAX_VALUES` distinct values, the
tools the base run used, the scorer, the question's length quartile) or one
pair of values of two features, kept when it holds at least
:data:`MIN_CELL` paired examples. Slices holding exactly the same examples
(a scorer that goes with a task type) are one test, named preferably by the
task type. In each slice the one-sided exact McNemar
test asks whether the candidate is worse: the p-value is
``P(Binomial(fixed + broken, ½) ≥ broken)`` (summed exactly in integers, as
``evaluation.compare.statistics.mcnemar_exact_p``). Searching many slices
is a multiple-testing problem: the p-values of all the slices tested are
adjusted by the Benjamini–Hochberg step-up procedure (Benjamini &
Hochberg (1995), "Controlling the false discovery rate", JRSS B
57:289–300), and the slices reported are those with a q-value below
``fdr``: among them, the expected share of false alarms is at most ``fdr``
(for independent or positively dependent tests).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from typing_extensions import TypedDict

__all__ = [
    "MAX_VALUES",
    "MIN_CELL",
    "SliceExample",
    "SliceReport",
    "bh_adjust",
    "regression_slices",
    "worse_p",
]

#: A metadata key with more distinct values than this is not a slice feature (an id, a free text).
MAX_VALUES = 20
#: A two-feature slice is tested when it holds at least this many paired examples.
MIN_CELL = 20
#: The default false discovery rate of ``compare_runs --slices``.
DEFAULT_FDR = 0.1


@dataclass(frozen=True)
class SliceExample:
    """One paired example scored by both runs: ``base`` / ``candidate``
    correct or not, and its ``features`` (feature name → value, as text)."""

    example_id: str
    base: bool
    candidate: bool
    features: Mapping[str, str]


class SliceRow(TypedDict):
    """One slice tested: ``slice`` (``feature = value``, two joined by `` & ``),
    ``examples``, the two accuracies and ``difference`` (candidate − base,
    0..1), ``fixed`` / ``broken``, the one-sided ``p_value`` and its
    Benjamini–Hochberg ``q_value``."""

    slice: str
    examples: int
    base_accuracy: float
    candidate_accuracy: float
    difference: float
    fixed: int
    broken: int
    p_value: float
    q_value: float


class SliceReport(TypedDict):
    """``tested``: slices tested; ``regressions``: those where the candidate
    is worse with ``q_value < fdr``, smallest q first; ``method``: the tests
    named."""

    tested: int
    fdr: float
    regressions: list[SliceRow]
    method: str


def worse_p(*, fixed: int, broken: int) -> float:
    """The one-sided exact McNemar p-value of "the candidate is worse":
    ``P(Binomial(fixed + broken, ½) >= broken)``; 1.0 with no discordant pair."""
    if fixed < 0 or broken < 0:
        raise ValueError(f"discordant counts must be >= 0, got fixed={fixed}, broken={broken}")
    m = fixed + broken
    if m == 0:
        return 1.0
    return sum(math.comb(m, k) for k in range(broken, m + 1)) / 2**m


def bh_adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg (1995) adjusted p-values (q-values), in the input
    order: sorted ascending, the ``i``-th of ``m`` becomes ``min over j >= i
    of m · p_(j) / j``, at most 1 — what
    ``statsmodels.stats.multitest.multipletests(method="fdr_bh")`` returns
    (the conformance tests check it). Raises ``ValueError`` for a p-value
    outside [0, 1]."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        p = p_values[i]
        if not 0 <= p <= 1:
            raise ValueError(f"p-values must be in [0, 1], got {p}")
        running = min(running, m * p / rank)
        adjusted[i] = running
    return adjusted


def _cells(examples: Sequence[SliceExample]) -> dict[str, list[SliceExample]]:
    """Every slice: one feature's values (any size), and two features'
    value pairs holding at least :data:`MIN_CELL` examples; of slices holding
    the same examples, one (one test: see the comment)."""
    single: dict[str, list[SliceExample]] = defaultdict(list)
    double: dict[str, list[SliceExample]] = defaultdict(list)
    names = sorted({name for e in examples for name in e.features})
    for e in examples:
        for name in names:
            if name in e.features:
                single[f"{name} = {e.features[name]}"].append(e)
        for a, b in combinations(names, 2):
            if a in e.features and b in e.features:
                double[f"{a} = {e.features[a]} & {b} = {e.features[b]}"].append(e)
    found = {**single, **{k: v for k, v in double.items() if len(v) >= MIN_CELL}}
    # two names for one set of examples (a scorer per task type, say) are one test: the name kept is
    # the one-feature one, else the task type's, else the shorter
    kept: dict[tuple[str, ...], str] = {}
    for name in sorted(found, key=lambda k: (" & " in k, "task type" not in k, len(k), k)):
        kept.setdefault(tuple(sorted(e.example_id for e in found[name])), name)
    return {name: found[name] for name in kept.values()}


def _row(name: str, members: list[SliceExample]) -> dict[str, Any]:
    n = len(members)
    base = sum(e.base for e in members)
    candidate = sum(e.candidate for e in members)
    fixed = sum(1 for e in members if e.candidate and not e.base)
    broken = sum(1 for e in members if e.base and not e.candidate)
    return {
        "slice": name,
        "examples": n,
        "base_accuracy": base / n,
        "candidate_accuracy": candidate / n,
        "difference": (candidate - base) / n,
        "fixed": fixed,
        "broken": broken,
        "p_value": worse_p(fixed=fixed, broken=broken),
    }


def regression_slices(examples: Sequence[SliceExample], *, fdr: float = DEFAULT_FDR) -> SliceReport:
    """Test every slice of ``examples`` (see the module docstring) and report
    those where the candidate is worse with a Benjamini–Hochberg q-value
    below ``fdr``. Raises ``ValueError`` for ``fdr`` outside (0, 1)."""
    if not 0 < fdr < 1:
        raise ValueError(f"--fdr must be a number in (0, 1), e.g. 0.1; got {fdr}")
    rows = [_row(name, members) for name, members in sorted(_cells(examples).items())]
    for row, q in zip(rows, bh_adjust([r["p_value"] for r in rows]), strict=True):
        row["q_value"] = q
    worse = [r for r in rows if r["difference"] < 0 and r["q_value"] < fdr]
    worse.sort(key=lambda r: (r["q_value"], r["slice"]))
    return {
        "tested": len(rows),
        "fdr": fdr,
        "regressions": worse,  # type: ignore[typeddict-item]
        "method": "one-sided exact McNemar test per slice (candidate worse); Benjamini-Hochberg (1995) "
        f"q-values over all {len(rows)} slices",
    }
