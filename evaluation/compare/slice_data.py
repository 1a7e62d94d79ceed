"""Reads for the regression slices (issue 43): the paired examples of two runs
with the features their slices are cut by (``evaluation.compare.slices``).

The features of an example: its ``task type``; each ``metadata.<key>``
whose values (scalars, as text) take at most ``slices.MAX_VALUES`` distinct
values over the paired examples; ``tools``, the tools the base run's turn
called (sorted, joined by ``+``; ``none``); the base run's ``scorer``; and
``question length``, its quartile over the paired examples (in characters).
A feature with one value only is left out: its slice is every example, the
comparison's overall test. Runs with epochs are reduced to each example's
majority vote (``evaluation.compare.over_epochs.majority_rows``).
:func:`run_slices` (the admin's comparison page) and :func:`run_slices_ids`
(``compare_runs --slices``) load them and call ``slices.regression_slices``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from common.errors import BadInput
from evaluation.compare.over_epochs import majority_rows
from evaluation.compare.selectors import run_compared_epoch_rows
from evaluation.compare.shapes import ComparedRow
from evaluation.compare.slices import DEFAULT_FDR, MAX_VALUES, SliceExample, SliceReport, regression_slices
from evaluation.models import Example, Prediction, Run
from evaluation.selectors import run_get
from turns.models import EventType, TurnEvent

__all__ = ["run_slice_examples", "run_slices", "run_slices_ids"]

#: Tools every answer calls: they say nothing about the example.
_ENDING_TOOLS = frozenset({"final_answer", "ask_user"})


def _paired(base: Run, candidate: Run) -> list[tuple[ComparedRow, ComparedRow]]:
    """The examples both runs scored, same content, as (base, candidate) rows."""
    theirs = {r.example_key: r for r in majority_rows(run_compared_epoch_rows(run=candidate))}
    pairs = []
    for row in majority_rows(run_compared_epoch_rows(run=base)):
        other = theirs.get(row.example_key)
        if other is not None and row.correct is not None and other.correct is not None:
            pairs.append((row, other))
    return pairs


def _tools(turn_ids: list[int]) -> dict[int, str]:
    """The tools each turn called, sorted and joined by ``+`` (one query)."""
    called: dict[int, set[str]] = defaultdict(set)
    events = TurnEvent.objects.filter(turn_id__in=turn_ids, type=EventType.TOOL_CALL)
    for turn_id, data in events.values_list("turn_id", "data"):
        name = ((data or {}).get("call") or {}).get("name")
        if name and name not in _ENDING_TOOLS:
            called[turn_id].add(str(name))
    return {t: "+".join(sorted(called[t])) or "none" for t in turn_ids}


def _quartile(length: int, cuts: list[float]) -> str:
    for i, cut in enumerate(cuts, start=1):
        if length <= cut:
            return f"Q{i} (<= {cut:g} chars)"
    return f"Q4 (> {cuts[-1]:g} chars)"


def _raw_features(pairs: list[tuple[ComparedRow, ComparedRow]], base: Run) -> list[dict[str, str]]:
    keys = [b.example_key for b, _ in pairs]
    examples = Example.objects.in_bulk(keys)
    scorers = dict(
        Prediction.objects.filter(run=base, example_id__in=keys, epoch=1).values_list("example_id", "scorer")
    )
    tools = _tools([b.turn_id for b, _ in pairs if b.turn_id is not None])
    lengths = [len(examples[k].question) for k in keys]
    cuts = statistics.quantiles(lengths, n=4) if len(lengths) >= 2 else []
    found = []
    for (row, _), length in zip(pairs, lengths, strict=True):
        example = examples[row.example_key]
        features: dict[str, str] = {"task type": row.task_type, "scorer": scorers.get(row.example_key) or "?"}
        if row.turn_id is not None:
            features["tools"] = tools.get(row.turn_id, "none")
        if cuts:
            features["question length"] = _quartile(length, cuts)
        for key, value in (example.metadata or {}).items():
            if isinstance(value, str | int | float | bool) or value is None:
                features[f"metadata.{key}"] = str(value)
        found.append(features)
    return found


def _kept(features: list[dict[str, str]]) -> set[str]:
    """Features with 2..MAX_VALUES distinct values (metadata) or at least 2 (the others)."""
    values: dict[str, set[str]] = defaultdict(set)
    for f in features:
        for name, value in f.items():
            values[name].add(value)
    return {
        name
        for name, seen in values.items()
        if len(seen) >= 2 and (not name.startswith("metadata.") or len(seen) <= MAX_VALUES)
    }


def run_slice_examples(*, base: Run, candidate: Run) -> list[SliceExample]:
    """The examples ``base`` and ``candidate`` both scored (same content),
    each with its verdicts and features (see the module docstring)."""
    pairs = _paired(base, candidate)
    features = _raw_features(pairs, base)
    kept = _kept(features)
    result: list[SliceExample] = []
    for (row, other), f in zip(pairs, features, strict=True):
        chosen: dict[str, Any] = {k: v for k, v in f.items() if k in kept}
        result.append(SliceExample(row.example_id, bool(row.correct), bool(other.correct), chosen))
    return result


def run_slices_ids(*, base_run_id: str, candidate_run_id: str, fdr: float) -> SliceReport:
    """The regression slices of ``candidate_run_id`` against ``base_run_id``
    (``evaluation.compare.slices``). Raises ``NotFound`` for an unknown run,
    ``BadInput`` for runs on different datasets or one run twice, and
    ``ValueError`` for ``fdr`` outside (0, 1)."""
    return run_slices(base=run_get(run_id=base_run_id), candidate=run_get(run_id=candidate_run_id), fdr=fdr)


def run_slices(*, base: Run, candidate: Run, fdr: float = DEFAULT_FDR) -> SliceReport:
    """The regression slices of ``candidate`` against ``base`` (the admin's
    comparison page shows them). Raises as :func:`run_slices_ids`."""
    if base.pk == candidate.pk:
        raise BadInput(f"cannot compare run {base.run_id!r} with itself: give two different runs")
    if base.dataset_id != candidate.dataset_id:
        raise BadInput(
            f"runs {base.run_id!r} and {candidate.run_id!r} are on different datasets: slices pair the same "
            "examples, so both runs must be on one dataset"
        )
    return regression_slices(run_slice_examples(base=base, candidate=candidate), fdr=fdr)
