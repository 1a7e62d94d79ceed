"""The shapes of a comparison of two runs: the compared rows a run's predictions
become, and the typed result (``Comparison``) the pairing builds and every
page, table and API answer reads. Plain values, no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired

from typing_extensions import TypedDict


@dataclass(frozen=True)
class ComparedRow:
    """One prediction of one run, reduced to what a comparison needs.

    ``example_id`` (the example's ``question_id``) pairs rows across runs;
    ``example_key`` (the primary key of the example row, one content of it)
    tells whether the example changed between the runs' dataset versions.
    ``correct``: ``True``/``False`` (an errored turn is ``False``), ``None``
    when it could not be scored."""

    example_key: int
    example_id: str
    task_type: str
    prediction_id: int
    turn_id: int | None
    correct: bool | None
    prediction: str
    gold: str
    error: str
    stop_reason: str


class RunSide(TypedDict):
    """One run of a comparison: its id, status, what it ran with (``model``,
    ``code_version``, ``review``: from its config snapshot) and its own
    accuracy over all its rows (``correct`` / ``scored``), and the dataset
    version it is on."""

    run_id: str
    status: str
    model: str | None
    code_version: str | None
    review: bool | None
    #: the dataset version the run is on
    dataset_version: int
    created_at: str
    finished_at: str | None
    total: int
    scored: int
    correct: int
    accuracy: float | None


class PairedAccuracy(TypedDict):
    """Accuracy of base and candidate over the examples both scored, paired.

    ``examples``: such examples; ``both_right`` / ``broken`` (right → wrong)
    / ``fixed`` (wrong → right) / ``both_wrong``: the 2×2 table;
    ``difference``: candidate − base accuracy, with its ``ci_low`` /
    ``ci_high`` (Newcombe 1998 method 10, at ``Comparison.confidence``);
    ``p_value``: the two-sided exact McNemar p-value; ``p_holm``: that
    p-value Holm-adjusted across the task types (per task type only,
    ``None`` overall). Accuracies, difference, interval and p-values are
    ``None`` when ``examples == 0``."""

    examples: int
    base_correct: int
    candidate_correct: int
    base_accuracy: float | None
    candidate_accuracy: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    both_right: int
    both_wrong: int
    fixed: int
    broken: int
    p_value: float | None
    p_holm: float | None


class PairSide(TypedDict):
    """One run's prediction of an example: ids to link to (``prediction_id``,
    ``turn_id``), the verdict, the answer, the error and the stop reason."""

    prediction_id: int
    turn_id: int | None
    correct: bool | None
    prediction: str
    error: str
    stop_reason: str


class ExamplePair(TypedDict):
    """An example and what each run did with it (``None``: not in that run)."""

    example_id: str
    task_type: str
    gold: str
    base: PairSide | None
    candidate: PairSide | None


class Delta(TypedDict):
    """A figure in each run and ``difference`` = candidate − base (``None``
    unless both are known)."""

    base: float | None
    candidate: float | None
    difference: float | None


class PairCounts(TypedDict):
    """How the examples of the two runs pair up: ``paired`` (in both runs,
    with the same content), ``scored_both`` (paired and scored by both: the
    accuracy's examples), ``unscored`` (paired, not scored by one or both),
    ``changed`` (in both runs' dataset versions with different content — a
    corrected gold answer, an edited question — so left out of the paired
    accuracy), ``only_base`` / ``only_candidate`` (in one run only: removed
    or added between the versions, or not run), ``errored`` (an error in
    either run, counted as wrong where scored)."""

    paired: int
    changed: int
    scored_both: int
    unscored: int
    only_base: int
    only_candidate: int
    errored: int


class Detectable(TypedDict):
    """What a comparison could have detected (``evaluation.compare.power``):
    ``difference``, the smallest paired difference (0..1, read as ``±``) the
    exact McNemar test on ``examples`` paired examples with ``discordant``
    of them discordant detects with probability ``power`` at ``alpha``
    (``None``: no difference up to 100 pp could be); ``note``, that said in
    a sentence, with whether the comparison was significant."""

    difference: float | None
    examples: int
    discordant: int
    power: float
    alpha: float
    note: str


class Comparison(TypedDict):
    """A baseline run compared with a candidate on the same dataset.

    ``overall`` and ``per_task_type`` (sorted by task type): the paired
    accuracy. ``fixed`` / ``broken``: examples wrong → right / right → wrong;
    ``errored``: examples with an error in either run; ``unscored``,
    ``changed``, ``only_base``, ``only_candidate``: example ids. ``metrics``: each run's
    own figures over all its rows (``cost`` in USD, ``input_tokens``,
    ``output_tokens``, ``steps_mean``, ``latency_p50_ms``,
    ``latency_p95_ms``, ``errors``); ``stop_reasons``: counts per stop
    reason; ``review``: the reviewer's effect in each run
    (``first_attempt_accuracy``, ``final_accuracy``, ``review_retries``,
    ``retry_fixed``, ``retry_broke``, ``review_failed``); ``checks``: the
    plugins' check pass rates side by side (``checks_side_by_side``).
    """

    dataset: str
    confidence: float
    base: RunSide
    candidate: RunSide
    overall: PairedAccuracy
    per_task_type: dict[str, PairedAccuracy]
    counts: PairCounts
    fixed: list[ExamplePair]
    broken: list[ExamplePair]
    errored: list[ExamplePair]
    unscored: list[str]
    changed: list[str]
    only_base: list[str]
    only_candidate: list[str]
    metrics: dict[str, Delta]
    stop_reasons: dict[str, Delta]
    review: dict[str, Delta]
    checks: dict[str, dict[str, Any]]
    #: when the runs are on two versions of the dataset: how the versions
    #: differ (``{"added", "changed", "removed"}``, counts of examples), read
    #: from the versions themselves — not from what each run happened to run
    version_diff: NotRequired[dict[str, int]]
    #: how the accuracies, interval and p-values were computed when not by
    #: exact McNemar and Newcombe: runs with epochs or partial credit
    #: compare per-example means (``evaluation.compare.over_epochs``)
    method: NotRequired[str]
    #: the smallest difference the comparison could have detected at 80 %
    #: power (issue 43): ``evaluation.compare.power.detectable_difference``
    detectable: NotRequired[Detectable]
    #: with ``compare_runs --slices``: ``evaluation.compare.slices.SliceReport``
    slices: NotRequired[Any]
    #: the paths diffed per example, the paired tests on trajectory pass and
    #: step counts (``evaluation.compare.trajectory_view.trajectory_comparison``)
    trajectory: NotRequired[dict[str, Any]]


@dataclass(frozen=True)
class EpochComparedRow:
    """One epoch of one example in a run: its ``ComparedRow``, the
    ``epoch`` and the ``score`` value (``None``: unscored; 0.5 for a
    judge's partial grade)."""

    row: ComparedRow
    epoch: int
    score: float | None
