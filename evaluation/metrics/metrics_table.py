"""The metrics of a run as a plain-text table (what ``manage.py run_eval`` prints).

Presentation only: the numbers come from :func:`evaluation.metrics.compute.compute_metrics`
(or a run's stored ``metrics``, read back from JSON).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from evaluation.metrics.conversation_metrics import conversation_table
from evaluation.metrics.intervals import accuracy_text, mean_text

__all__ = ["format_table"]

_DASH = "—"


def _pct(value: float | None) -> str:
    return _DASH if value is None else f"{value * 100:.1f}%"


def _num(value: float | None, digits: int = 1) -> str:
    return _DASH if value is None else f"{value:,.{digits}f}"


def _cost(value: float | None, unpriced: int = 0) -> str:
    if value is None:
        return _DASH
    return f"${value:,.4f}" + (f" (+{unpriced} unpriced)" if unpriced else "")


def _summary_table(metrics: dict[str, Any]) -> Table:
    """The summary: accuracy with its interval, counts, tokens, cost, latency, review."""
    tokens = metrics.get("tokens") or {}
    latency = metrics.get("latency_ms") or {}

    summary = Table(title="Evaluation metrics", show_header=False)
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    summary.add_row("accuracy", accuracy_text(int(metrics.get("correct", 0)), int(metrics.get("scored", 0))))
    f1 = metrics.get("f1")
    if f1:
        summary.add_row("mean token F1", mean_text(f1))
    score_mean = metrics.get("score_mean")
    if not f1 and score_mean is not None and score_mean != metrics.get("accuracy"):
        summary.add_row("mean score (partial = 0.5)", f"{score_mean:.3f}")
    judge = metrics.get("judge") or {}
    if judge:
        grades = ", ".join(f"{g} {n}" for g, n in (judge.get("grades") or {}).items())
        summary.add_row("judge grades", f"{grades} ({judge.get('cached', 0)} from the cache)")
    summary.add_row("total", str(metrics.get("total", 0)))
    summary.add_row("scored", str(metrics.get("scored", 0)))
    summary.add_row("unscored", str(metrics.get("unscored", 0)))
    summary.add_row("correct", str(metrics.get("correct", 0)))
    summary.add_row("errors", str(metrics.get("errors", 0)))
    summary.add_row("mean steps", _num(metrics.get("steps_mean"), 2))
    summary.add_row("input tokens", f"{tokens.get('input', 0):,}")
    summary.add_row("output tokens", f"{tokens.get('output', 0):,}")
    summary.add_row("rows with unknown tokens", str(tokens.get("unknown_rows", 0)))
    summary.add_row("cost", _cost(metrics.get("cost")))
    summary.add_row("latency p50 (ms)", _num(latency.get("p50")))
    summary.add_row("latency p95 (ms)", _num(latency.get("p95")))
    summary.add_row("latency mean (ms)", _num(latency.get("mean")))
    _review_rows(summary, metrics.get("review") or {})
    return summary


def _review_rows(summary: Table, review: dict[str, Any]) -> None:
    """The review phase's rows of the summary (when there were retries or verdicts)."""
    if review.get("review_retries"):
        summary.add_row("first-attempt accuracy", _pct(review.get("first_attempt_accuracy")))
        summary.add_row(
            "review retries (fixed/broke)",
            f"{review['review_retries']} ({review.get('retry_fixed', 0)}/{review.get('retry_broke', 0)})",
        )
    if review.get("verdicts"):
        summary.add_row("review verdicts", ", ".join(f"{v} {n}" for v, n in review["verdicts"].items()))


def _per_task_table(metrics: dict[str, Any]) -> Table:
    """Accuracy per task type."""
    per_task = Table(title="Per task type")
    with_f1 = bool(metrics.get("f1"))
    columns = [
        ("task type", "left"),
        ("total", "right"),
        ("scored", "right"),
        ("correct", "right"),
        ("accuracy (95% CI)", "right"),
    ]
    if with_f1:
        columns.append(("token F1 (95% CI)", "right"))
    for name, justify in columns:
        per_task.add_column(name, justify=justify)  # type: ignore[arg-type]
    for task_type, bucket in (metrics.get("per_task_type") or {}).items():
        cells = [
            task_type,
            str(bucket.get("total", 0)),
            str(bucket.get("scored", 0)),
            str(bucket.get("correct", 0)),
            accuracy_text(int(bucket.get("correct", 0)), int(bucket.get("scored", 0))),
        ]
        if with_f1:
            cells.append(mean_text(bucket["f1"]) if bucket.get("f1") else _DASH)
        per_task.add_row(*cells)
    return per_task


def _by_model_table(metrics: dict[str, Any]) -> Table:
    """Calls, calls served by the LLM-call cache (not in ``calls``, not
    charged), tokens and cost per model."""
    by_model = Table(title="Per model")
    for name, justify in (
        ("model", "left"),
        ("calls", "right"),
        ("cached", "right"),
        ("input tokens", "right"),
        ("output tokens", "right"),
        ("cost", "right"),
    ):
        by_model.add_column(name, justify=justify)  # type: ignore[arg-type]
    for model, bucket in ((metrics.get("usage") or {}).get("by_model") or {}).items():
        by_model.add_row(
            model or "(unnamed)",
            str(bucket.get("calls", 0)),
            str(bucket.get("cache_hits", 0)),
            f"{bucket.get('input_tokens', 0):,}",
            f"{bucket.get('output_tokens', 0):,}",
            _cost(bucket.get("cost"), int(bucket.get("unpriced_calls") or 0)),
        )
    return by_model


def _stops_table(metrics: dict[str, Any]) -> Table:
    """How many turns ended with each stop reason."""
    stops = Table(title="Stop reasons")
    stops.add_column("stop reason")
    stops.add_column("count", justify="right")
    for reason, count in (metrics.get("stop_reasons") or {}).items():
        stops.add_row(reason or "(none)", str(count))
    return stops


def format_table(metrics: dict[str, Any], *, width: int = 80) -> str:
    """Render a metrics dict (as returned by :func:`evaluation.metrics.compute.compute_metrics`, or read back
    from JSON) as plain-text tables: summary, per task type, per model (when the
    metrics have usage), stop reasons, and the plugins' checks when the run
    recorded any (``checks_table``).

    Rendered with ``rich`` into a string, without colour or other escape codes,
    ``width`` columns wide or, for a table that needs more, as wide as its
    cells (nothing is cut short with "…"). Missing values show as ``—``; accuracy as a percentage
    with ``correct/scored`` and its 95 % Wilson interval beside it (computed
    from the counts, so runs stored before intervals existed show it too);
    a run with conversation examples adds the "Conversations" table
    (``conversation_table``), a run with trajectory verdicts the "Trajectory" table
    (``trajectory_table``), a run with epochs the "Epochs" table (``epochs_table``)."""
    summary, per_task, by_model, stops = (
        _summary_table(metrics),
        _per_task_table(metrics),
        _by_model_table(metrics),
        _stops_table(metrics),
    )
    console, buffer = text_console(width)
    epochs = epochs_table(metrics.get("epochs") or {})
    trajectory = trajectory_table(metrics.get("trajectory") or {})
    conversations = conversation_table(metrics.get("conversations") or {})
    tables = [
        summary,
        per_task,
        *([conversations] if conversations else []),
        *([trajectory] if trajectory else []),
        *([epochs] if epochs else []),
        *([by_model] if by_model.row_count else []),
        stops,
    ]
    for table in tables:
        # never cut a cell: a table wider than ``width`` (epochs with many
        # k, a long model name) prints at its own width, in a log file too
        console.width = max(
            width, console.measure(table, options=console.options.update(max_width=10_000)).maximum
        )
        console.print(table)
    checks = metrics.get("checks") or {}
    checks_part = checks_table(checks)
    if checks_part is not None:
        # wide enough for the check names, which are what a reader looks for
        console.width = max(width, max(len(name) for name in checks) + 70)
        console.print(checks_part)
    return buffer.getvalue()


def text_console(width: int) -> tuple[Console, io.StringIO]:
    """A ``rich`` console that prints plain text (no colour, markup or
    emoji, whatever the terminal) ``width`` columns wide into the returned
    buffer: what the printed tables of ``run_eval``, ``rescore`` and
    ``compare_runs`` are rendered with, so a log file reads like the terminal."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=False,
        color_system=None,
        no_color=True,
        highlight=False,
        emoji=False,
        markup=False,
    )
    return console, buffer


def checks_table(checks: Mapping[str, Mapping[str, Any]]) -> Table | None:
    """The "Checks" table of the metrics table (``rich``): one row per check,
    and one per task type under it when the run has several; ``None`` when
    the run recorded no checks."""
    if not checks:
        return None
    table = Table(title="Checks")
    table.add_column("check", no_wrap=True, min_width=max(len(name) for name in checks))
    for name, justify in (
        ("scope", "left"),
        ("ran", "right"),
        ("passed", "right"),
        ("failed", "right"),
        ("pass rate", "right"),
        ("turns failed", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for name, m in checks.items():
        per_type = m.get("per_task_type") or {}
        buckets = [(name, m["scope"], m)] + (
            [(f"  {t}", "", b) for t, b in per_type.items()] if len(per_type) > 1 else []
        )
        for label, scope, b in buckets:
            table.add_row(
                label,
                scope,
                str(b["ran"]),
                str(b["passed"]),
                str(b["failed"]),
                _pct(b["pass_rate"]),
                f"{b['turns_failed']}/{b['turns']}",
            )
    return table


def _ci(interval: list[float] | None) -> str:
    return _DASH if not interval else f"{interval[0] * 100:.1f}–{interval[1] * 100:.1f}%"


def epochs_table(epochs: Mapping[str, Any]) -> Table | None:
    """The "Epochs" table of a run with epochs (``metrics["epochs"]``,
    ``evaluation.metrics.compute.epoch_metrics``): per task type and overall, the mean
    accuracy over examples with its 95 % interval, pass@k for each k,
    majority-vote accuracy and the share of examples whose epochs disagree;
    ``None`` for a run without epochs."""
    if not epochs:
        return None
    k_max = int(epochs.get("epochs") or 1)
    table = Table(title=f"Epochs ({k_max} per example)")
    table.add_column("task type")
    table.add_column("examples", justify="right")
    table.add_column("mean acc. (95% CI)", justify="right")
    for k in range(1, k_max + 1):
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("majority", justify="right")
    table.add_column("disagree", justify="right")
    per_type = epochs.get("per_task_type") or {}
    buckets = [*per_type.items(), *([("all", epochs)] if len(per_type) != 1 else [])]
    for label, b in buckets:
        pass_k = b.get("pass_at_k") or {}
        table.add_row(
            label,
            str(b.get("scored_examples", 0)),
            f"{_pct(b.get('mean_accuracy'))} ({_ci(b.get('mean_accuracy_ci'))})",
            *(_pct(pass_k.get(str(k))) for k in range(1, k_max + 1)),
            _pct(b.get("majority_accuracy")),
            _pct(b.get("disagreement")),
        )
    return table


def trajectory_table(trajectory: Mapping[str, Any]) -> Table | None:
    """The "Trajectory" table (``metrics["trajectory"]``,
    ``evaluation.metrics.trajectory_metrics``): per trajectory scorer, and per
    task type under it when there are several, the predictions scored, the
    passed ones, the pass rate with its 95 % Wilson interval and the mean
    value (``tool_f1``'s F1) with its 95 % Student-t interval; ``None`` when
    no path was scored."""
    if not trajectory:
        return None
    table = Table(title="Trajectory (the agent's path)")
    table.add_column("scorer")
    table.add_column("scored", justify="right")
    table.add_column("passed", justify="right")
    table.add_column("pass rate (95% CI)", justify="right")
    table.add_column("mean (95% CI)", justify="right")
    for name, block in trajectory.items():
        per_type = block.get("per_task_type") or {}
        rows = [(name, block)] + ([(f"  {t}", b) for t, b in per_type.items()] if len(per_type) > 1 else [])
        for label, b in rows:
            table.add_row(
                label,
                str(b["scored"]),
                str(b["correct"]),
                f"{_pct(b.get('accuracy'))} ({_ci(b.get('accuracy_ci'))})",
                f"{_num(b.get('mean'), 3)} ({_num_ci(b.get('mean_ci'))})",
            )
    return table


def _num_ci(interval: list[float] | None) -> str:
    return _DASH if not interval else f"{interval[0]:.3f}–{interval[1]:.3f}"
