"""The leaderboard of an experiment: its variants ranked, every pair of
variants compared, the variants tied for first and the accuracy-vs-cost
frontier (docs/evaluating.md#leaderboard; docs/architecture.md#experiments).
The module is ``ranking``, not ``leaderboard``: that name is the command's
(``manage.py leaderboard``), and a module name says one module in an app.

Read-only, over stored rows: each variant's run and its stored metrics
(``evaluation.metrics.compute``), and for every pair of finished variants
``evaluation.compare.services.run_compare`` — the same comparison
``compare_runs`` prints — whose overall difference and p-value are taken as
they are:

- **Accuracy** is ``correct / scored`` with its 95 % Wilson interval (Wilson
  1927), as the run stores it; a run with epochs is ranked by its mean
  accuracy over examples (``epoch_metrics``) with a 95 % percentile bootstrap
  interval over the examples (Efron & Tibshirani 1993, ch. 13; 10,000 seeded
  resamples of ``evaluation.compare.bootstrap``), and shows pass@k.
- **Ranking**, best first: accuracy, then lower total cost (unknown cost
  after known), then name. Only finished runs (``success``) are ranked; the
  others follow, unranked, with their status and no significance.
- **Pairs**: every two ranked variants, paired by example: exact McNemar
  (McNemar 1947) on the examples both scored, or with epochs the paired
  bootstrap over per-example means (``evaluation.compare.over_epochs``);
  then every p-value Holm-adjusted across all the pairs (Holm 1979).
- **Top group**: the best variant and every variant not significantly worse
  than it — out only when its Holm-adjusted p against the best is below
  ``alpha`` and it is the worse of the two on the paired examples.
- **Pareto frontier** on accuracy vs total cost: the ranked variants with a
  known cost that no other such variant dominates (at least as accurate and at
  most as costly, and strictly better in one). A variant of unknown cost is
  not on it (``cost_unknown`` names them). With uncertainty
  (``evaluation.experiments.frontier``): each variant's cost per example with
  a bootstrap interval, and the variants whose place the intervals leave
  undecided (``frontier_undecided``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from common.errors import BadInput
from evaluation.compare.bootstrap import RESAMPLES, SEED, paired_bootstrap
from evaluation.compare.selectors import run_compared_epoch_rows
from evaluation.compare.services import run_compare
from evaluation.compare.statistics import holm_adjust
from evaluation.experiments import trajectory_ranking as by_path
from evaluation.experiments.frontier import mark_uncertainty, pareto_frontier
from evaluation.experiments.lookup import experiment_get
from evaluation.experiments.stopping import decided_early_at
from evaluation.models import Experiment, Run, RunStatus
from evaluation.selectors import run_stored_metrics

__all__ = [
    "Leaderboard",
    "PairRow",
    "VariantRow",
    "best_variant",
    "experiment_get",
    "leaderboard",
    "leaderboard_json",
]

#: How a pair was tested, as ``PairRow.test`` says it.
MCNEMAR = "exact McNemar"
BOOTSTRAP = "paired bootstrap"


@dataclass
class VariantRow:
    """One variant of the leaderboard: its run and figures.

    ``rank``: 1-based among the finished variants, ``None`` for an unfinished,
    cancelled or errored run. ``accuracy`` in [0, 1] (``None``: nothing
    scored) with ``ci_low`` / ``ci_high`` (95 %, ``interval`` = ``"wilson"``
    or, with epochs, ``"bootstrap"``); ``n``: scored predictions, or with
    epochs scored examples; ``correct``: correct predictions (every epoch).
    ``pass_at_k``: ``{"1": …, …, "K": …}`` with epochs, else ``None``.
    ``per_task_type``: ``{task_type: {"accuracy", "ci_low", "ci_high", "n"}}``.
    ``cost`` and ``cost_per_correct`` in USD, ``None`` when unknown (no
    priced call) or, per correct answer, when nothing is correct.
    ``tokens``: ``{"input", "output"}``; latencies in seconds."""

    name: str
    run_id: str
    run_pk: int
    status: str
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    interval: str
    n: int
    correct: int
    epochs: int
    pass_at_k: dict[str, float | None] | None
    per_task_type: dict[str, dict[str, Any]]
    cost: float | None
    cost_per_correct: float | None
    tokens: dict[str, int]
    latency_p50_s: float | None
    latency_p95_s: float | None
    errors: int
    stop_reasons: dict[str, int]
    rank: int | None = None
    top_group: bool = False
    pareto: bool = False
    #: mean cost per example (USD) and its 95 % bootstrap interval (``evaluation.experiments.frontier``)
    cost_per_example: float | None = None
    cost_ci: tuple[float, float] | None = None
    frontier_undecided: bool = False
    #: trajectory pass rate ``{"accuracy", "ci_low", "ci_high", "n", "correct"}`` (``trajectory_ranking``)
    trajectory: dict[str, Any] | None = None
    #: the run's conversation figures (``metrics["conversations"]``: goal success, turns to goal)
    conversations: dict[str, Any] | None = None


@dataclass(frozen=True)
class PairRow:
    """Two ranked variants compared on the examples both scored: ``a`` ranks
    above ``b``; ``difference`` = accuracy of ``a`` − accuracy of ``b`` (in
    [-1, 1]); ``p_value`` two-sided (``test``: exact McNemar, or the paired
    bootstrap with epochs), ``p_holm`` Holm-adjusted across all the pairs;
    ``n`` the paired examples. The figures are ``None`` when ``n == 0``."""

    a: str
    b: str
    difference: float | None
    p_value: float | None
    p_holm: float | None
    n: int
    test: str
    a_pk: int
    b_pk: int
    #: the smallest difference (0..1, ±) the pair could have detected at 80 %
    #: power, Holm's first step over all the pairs (``evaluation.compare.power``)
    detectable: float | None = None


@dataclass
class Leaderboard:
    """An experiment's leaderboard (see the module docstring): ``variants``
    best first, then the unranked ones; ``pairs`` in rank order; ``top_group``
    names (best first); ``frontier`` names by ascending cost; ``cost_unknown``
    the ranked variants of unknown cost (not on the frontier); ``stopped_early``
    the ``--stop-when-decided`` record (``stopping``), or ``None``."""

    experiment: str
    experiment_pk: int
    dataset: str
    dataset_version: int
    alpha: float
    variants: list[VariantRow]
    pairs: list[PairRow] = field(default_factory=list)
    top_group: list[str] = field(default_factory=list)
    frontier: list[str] = field(default_factory=list)
    cost_unknown: list[str] = field(default_factory=list)
    frontier_undecided: list[str] = field(default_factory=list)
    stopped_early: dict[str, Any] | None = None
    rank_by: str = "answer"  # or "trajectory" (``evaluation.experiments.trajectory_ranking``)


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000


def _bootstrap_interval(run: Run) -> tuple[float | None, float | None]:
    """The 95 % percentile bootstrap interval of the run's mean accuracy over
    examples (each example's share of correct scored epochs): the paired
    bootstrap against a run scoring 0 everywhere, whose difference is the
    mean itself — the same seeded resampling as a comparison's."""
    values: dict[int, list[float]] = {}
    for r in run_compared_epoch_rows(run=run):
        if r.row.correct is not None:
            values.setdefault(r.row.example_key, []).append(float(r.row.correct))
    means = {k: sum(v) / len(v) for k, v in values.items()}
    if not means:
        return None, None
    result = paired_bootstrap(dict.fromkeys(means, 0.0), means, resamples=RESAMPLES, seed=SEED)
    return result.ci_low, result.ci_high


def _task_types(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Accuracy per task type: Wilson's, or with epochs the mean over
    examples with its Student-t interval (``epoch_metrics``)."""
    epochs = metrics.get("epochs")
    rows: dict[str, dict[str, Any]] = {}
    if epochs:
        for task_type, b in (epochs.get("per_task_type") or {}).items():
            ci = b.get("mean_accuracy_ci") or [None, None]
            rows[task_type] = {
                "accuracy": b.get("mean_accuracy"),
                "ci_low": ci[0],
                "ci_high": ci[1],
                "n": int(b.get("scored_examples") or 0),
            }
        return rows
    for task_type, b in (metrics.get("per_task_type") or {}).items():
        ci = b.get("accuracy_ci") or [None, None]
        rows[task_type] = {
            "accuracy": b.get("accuracy"),
            "ci_low": ci[0],
            "ci_high": ci[1],
            "n": int(b.get("scored") or 0),
        }
    return rows


def _variant_row(run: Run) -> VariantRow:
    """A variant's row from its run's stored metrics (computed now for a run
    that has not finished)."""
    metrics = run_stored_metrics(run=run)
    epochs = metrics.get("epochs") or {}
    correct, cost = int(metrics.get("correct") or 0), metrics.get("cost")
    if epochs:
        accuracy, n = epochs.get("mean_accuracy"), int(epochs.get("scored_examples") or 0)
        (ci_low, ci_high), interval = _bootstrap_interval(run), "bootstrap"
    else:
        accuracy, n = metrics.get("accuracy"), int(metrics.get("scored") or 0)
        (ci_low, ci_high), interval = metrics.get("accuracy_ci") or (None, None), "wilson"
    tokens, latency = metrics.get("tokens") or {}, metrics.get("latency_ms") or {}
    if run.status != RunStatus.SUCCESS:
        # an interrupted run's examples not yet driven are stored as errors
        # until they run: no accuracy is shown for it, only what it used
        accuracy, ci_low, ci_high = None, None, None
    return VariantRow(
        name=run.variant or run.run_id,
        run_id=run.run_id,
        run_pk=run.pk,
        status=run.status,
        accuracy=accuracy,
        ci_low=ci_low,
        ci_high=ci_high,
        interval=interval,
        n=n,
        correct=correct,
        epochs=int(epochs.get("epochs") or 1),
        pass_at_k=epochs.get("pass_at_k") if epochs else None,
        per_task_type=_task_types(metrics),
        cost=cost,
        cost_per_correct=cost / correct if cost is not None and correct else None,
        tokens={"input": int(tokens.get("input") or 0), "output": int(tokens.get("output") or 0)},
        latency_p50_s=_seconds(latency.get("p50")),
        latency_p95_s=_seconds(latency.get("p95")),
        errors=int(metrics.get("errors") or 0),
        stop_reasons=dict(metrics.get("stop_reasons") or {}),
        trajectory=by_path.trajectory_figures(metrics) if run.status == RunStatus.SUCCESS else None,
        conversations=metrics.get("conversations"),
    )


def _rank_key(accuracy: float | None, cost: float | None, name: str) -> tuple[Any, ...]:
    """Best first: higher accuracy (unknown last), lower cost (unknown last), name."""
    return (accuracy is None, -(accuracy or 0.0), cost is None, cost or 0.0, name)


def _answer_key(v: VariantRow) -> tuple[Any, ...]:
    return _rank_key(v.accuracy, v.cost, v.name)


def _variant_runs(experiment: Experiment) -> list[Run]:
    """The experiment's runs, one per variant (the latest, should a variant
    name have two), with their datasets."""
    runs: dict[str, Run] = {}
    for run in experiment.runs.select_related("dataset").order_by("-created_at", "-pk"):
        runs.setdefault(run.variant or run.run_id, run)
    return list(runs.values())


def _pairs(ranked: list[VariantRow], runs: dict[int, Run], alpha: float) -> list[PairRow]:
    """Every two ranked variants compared (``a`` above ``b``), the p-values
    then Holm-adjusted across all the pairs; each with its smallest
    detectable difference at ``alpha`` over the pairs."""
    from evaluation.compare.power import detectable_difference  # scipy: see compare.services

    found = []
    for i, a in enumerate(ranked):
        for b in ranked[i + 1 :]:
            comparison = run_compare(base=runs[b.run_pk], candidate=runs[a.run_pk])
            overall = comparison["overall"]
            found.append((a, b, overall, BOOTSTRAP if comparison.get("method") else MCNEMAR))
    adjusted = holm_adjust([overall["p_value"] for _, _, overall, _ in found])
    return [
        PairRow(
            a=a.name,
            b=b.name,
            difference=overall["difference"],
            p_value=overall["p_value"],
            p_holm=p_holm,
            n=overall["examples"],
            test=test,
            a_pk=a.run_pk,
            b_pk=b.run_pk,
            detectable=detectable_difference(
                overall["examples"],
                discordant=overall["fixed"] + overall["broken"],
                alpha=alpha,
                pairs=len(found),
            ),
        )
        for (a, b, overall, test), p_holm in zip(found, adjusted, strict=True)
    ]


def _top_group(ranked: list[VariantRow], pairs: list[PairRow], alpha: float) -> list[str]:
    """The best variant and those not significantly worse than it at ``alpha``."""
    if not ranked:
        return []
    best = ranked[0].name
    worse = {
        p.b
        for p in pairs
        if p.a == best and p.p_holm is not None and p.p_holm < alpha and (p.difference or 0) > 0
    }
    return [v.name for v in ranked if v.name not in worse]


def leaderboard(
    experiment: Experiment, *, alpha: float | None = None, rank_by: str | None = None
) -> Leaderboard:
    """The leaderboard of ``experiment`` at significance level ``alpha``
    (``None``: the experiment's own ``alpha``) ranked by ``rank_by``
    (``"answer"`` or ``"trajectory"``; ``None``: the experiment file's, else
    answer), from its stored runs and predictions; writes nothing. One
    comparison per pair of finished variants. Raises ``BadInput`` for an
    ``alpha`` outside (0, 1) or an unknown ``rank_by``."""
    level = experiment.alpha if alpha is None else alpha
    if not 0 < level < 1:
        raise BadInput(f"alpha must be a number between 0 and 1 (exclusive), got {level}")
    by = by_path.rank_by_check(rank_by or ((experiment.spec or {}).get("shared") or {}).get("rank_by"))
    runs = {run.pk: run for run in _variant_runs(experiment)}
    rows = [_variant_row(run) for run in runs.values()]
    key = by_path.trajectory_rank_key if by == by_path.TRAJECTORY else _answer_key
    ranked = sorted((v for v in rows if v.status == RunStatus.SUCCESS), key=key)
    unranked = sorted((v for v in rows if v.status != RunStatus.SUCCESS), key=lambda v: v.name)
    if by == by_path.TRAJECTORY:
        pairs = [PairRow(**p) for p in by_path.trajectory_pairs(ranked, runs, level)]
    else:
        pairs = _pairs(ranked, runs, level)
    top_group = _top_group(ranked, pairs, level)
    frontier, cost_unknown = pareto_frontier(ranked)
    undecided = mark_uncertainty(ranked, runs, frontier)
    for rank, v in enumerate(ranked, start=1):
        v.rank, v.top_group, v.pareto = rank, v.name in top_group, v.name in frontier
    return Leaderboard(
        experiment=experiment.name,
        experiment_pk=experiment.pk,
        dataset=experiment.dataset.name,
        dataset_version=experiment.dataset_version,
        alpha=level,
        variants=[*ranked, *unranked],
        pairs=pairs,
        top_group=top_group,
        frontier=frontier,
        cost_unknown=cost_unknown,
        frontier_undecided=undecided,
        stopped_early=(experiment.spec or {}).get("stopped_early"),
        rank_by=by,
    )


def best_variant(runs: Iterable[Run]) -> str | None:
    """The name of the variant the leaderboard ranks first among ``runs``
    (finished ones, by the leaderboard's order, from stored metrics alone —
    no comparison), or ``None`` when none has finished. For list pages."""
    keys = []
    for run in runs:
        if run.status != RunStatus.SUCCESS:
            continue
        metrics = run.metrics or {}
        epochs = metrics.get("epochs") or {}
        accuracy = epochs.get("mean_accuracy") if epochs else metrics.get("accuracy")
        name = run.variant or run.run_id
        keys.append((_rank_key(accuracy, metrics.get("cost"), name), name))
    return min(keys)[1] if keys else None


def _variant_json(v: VariantRow) -> dict[str, Any]:
    return {
        "name": v.name,
        "run_id": v.run_id,
        "status": v.status,
        "rank": v.rank,
        "accuracy": v.accuracy,
        "ci_low": v.ci_low,
        "ci_high": v.ci_high,
        "interval": v.interval,
        "n": v.n,
        "correct": v.correct,
        "epochs": v.epochs,
        "pass_at_k": v.pass_at_k,
        "cost": v.cost,
        "cost_per_correct": v.cost_per_correct,
        "cost_per_example": v.cost_per_example,
        "cost_per_example_ci": list(v.cost_ci) if v.cost_ci else None,
        "frontier_undecided": v.frontier_undecided,
        "top_group": v.top_group,
        "pareto": v.pareto,
        "per_task_type": v.per_task_type,
        "tokens": v.tokens,
        "latency_p50_s": v.latency_p50_s,
        "latency_p95_s": v.latency_p95_s,
        "errors": v.errors,
        "stop_reasons": v.stop_reasons,
        "trajectory": v.trajectory,
        # only for a run with conversation examples, so other boards' JSON is what it was
        **({"conversations": v.conversations} if v.conversations else {}),
    }


def leaderboard_json(board: Leaderboard) -> dict[str, Any]:
    """``board`` as JSON-serialisable values (docs/evaluating.md#leaderboard):
    ``experiment``, ``dataset``, ``dataset_version``, ``alpha``,
    ``variants`` (best first, then the unranked; each with ``name``,
    ``run_id``, ``status``, ``rank``, ``accuracy``, ``ci_low``, ``ci_high``,
    ``interval``, ``n``, ``correct``, ``epochs``, ``pass_at_k``, ``cost``,
    ``cost_per_correct``, ``top_group``, ``pareto``, ``per_task_type``,
    ``tokens``, ``latency_p50_s``, ``latency_p95_s``, ``errors``,
    ``stop_reasons``, ``trajectory``: the trajectory pass rate with its
    interval or ``null``; ``conversations`` for a run with conversation
    examples: ``metrics["conversations"]``), ``rank_by``, ``pairs`` (each ``a``, ``b``, ``difference``,
    ``p_value``, ``p_holm``, ``n``, ``test``, ``detectable_difference``: ± the
    smallest difference detectable at 80 % power), ``top_group``, ``frontier``
    (ascending cost), ``cost_unknown``, ``stopped_early``/``decided_early_at`` (``stopping``)."""
    return {
        "experiment": board.experiment,
        "rank_by": board.rank_by,
        "dataset": board.dataset,
        "dataset_version": board.dataset_version,
        "alpha": board.alpha,
        "variants": [_variant_json(v) for v in board.variants],
        "pairs": [
            {"a": p.a, "b": p.b, "difference": p.difference, "p_value": p.p_value, "p_holm": p.p_holm}
            | {"n": p.n, "test": p.test, "detectable_difference": p.detectable}
            | {"decided_early_at": decided_early_at(board.stopped_early, p.a, p.b)}
            for p in board.pairs
        ],
        "top_group": list(board.top_group),
        "frontier": list(board.frontier),
        "cost_unknown": list(board.cost_unknown),
        "frontier_undecided": list(board.frontier_undecided),
        "stopped_early": board.stopped_early,
    }
