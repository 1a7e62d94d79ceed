"""The shape of a conformance case and the one check every module runs."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tests.shared_data import dataset_path


def rows(name: str) -> list[dict[str, Any]]:
    """Every row of a shared dataset file."""
    with dataset_path(name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass(frozen=True)
class Case:
    """One answer variant: where it came from (``source``: the row's id),
    its form (``form``, the key of the variant generator), the prediction,
    the gold, and anything the scorer needs besides (``extra``)."""

    source: str
    form: str
    prediction: str
    gold: str
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What a case came to: AgentLab's and the reference's verdicts."""

    case: Case
    ours: Any
    reference: Any


def disagreements(
    cases: Iterable[Case],
    *,
    ours: Callable[[Case], Any],
    reference: Callable[[Case], Any],
    deviations: dict[str, tuple[Any, Any, str]],
) -> tuple[list[Outcome], Counter[str]]:
    """Run every case through both sides. A case whose form is not a
    documented deviation must give equal verdicts; a case whose form is one
    (``deviations[form] = (ours, reference, reason)``) must give exactly
    the documented pair (an expected value may be a predicate, for verdicts
    that vary by case). Returns the cases that broke the rule and the
    number of cases per form."""
    broken: list[Outcome] = []
    per_form: Counter[str] = Counter()
    for case in cases:
        per_form[case.form] += 1
        outcome = Outcome(case, ours(case), reference(case))
        if case.form in deviations:
            expected_ours, expected_reference, _ = deviations[case.form]
            if not (_meets(outcome.ours, expected_ours) and _meets(outcome.reference, expected_reference)):
                broken.append(outcome)
        elif outcome.ours != outcome.reference:
            broken.append(outcome)
    return broken, per_form


def _meets(actual: Any, expected: Any) -> bool:
    return bool(expected(actual)) if callable(expected) else bool(actual == expected)
