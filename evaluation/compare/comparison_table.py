"""A comparison of two runs as plain-text tables (what ``manage.py
compare_runs`` and ``run_eval --baseline`` print).

Presentation only: the numbers are ``evaluation.compare.pairing.Comparison``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evaluation.compare.pairing import few_examples_warning, unfinished_warning, versions_note
from evaluation.compare.shapes import Comparison, Delta, ExamplePair, PairedAccuracy
from evaluation.compare.slices import SliceReport

if TYPE_CHECKING:
    # rich is imported where a table is built: the admin's pages import this
    # module for accuracy_rows and delta_sections, and every command loads
    # the admin (rich is about a tenth of a command's start-up)
    from rich.table import Table

__all__ = ["format_comparison", "format_slices", "slice_rows"]

_DASH = "—"

#: Examples listed per fixed / broken / errored table; the rest are counted.
LIST_LIMIT = 30


def _pct(value: float | None) -> str:
    return _DASH if value is None else f"{value * 100:.1f}%"


def _pp(value: float | None) -> str:
    """A difference of proportions in percentage points."""
    return _DASH if value is None else f"{value * 100:+.1f} pp"


def _interval(low: float | None, high: float | None) -> str:
    """An interval of a difference in percentage points, on one line."""
    if low is None or high is None:
        return _DASH
    return f"{low * 100:+.1f} to {high * 100:+.1f}"


def _p(value: float | None) -> str:
    if value is None:
        return _DASH
    return f"{value:.4f}" if value >= 0.0001 else f"{value:.1e}"


def _num(value: float | None, digits: int = 1, *, sign: bool = False) -> str:
    if value is None:
        return _DASH
    return f"{value:+,.{digits}f}" if sign else f"{value:,.{digits}f}"


def _accuracy_row(label: str, s: PairedAccuracy, *, holm: bool) -> list[str]:
    return [
        label,
        str(s["examples"]),
        _pct(s["base_accuracy"]),
        _pct(s["candidate_accuracy"]),
        _pp(s["difference"]),
        _interval(s["ci_low"], s["ci_high"]),
        str(s["fixed"]),
        str(s["broken"]),
        _p(s["p_value"]),
        _p(s["p_holm"]) if holm else "",
    ]


def _delta_table(title: str) -> Table:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("")
    for name in ("base", "candidate", "difference"):
        table.add_column(name, justify="right")
    return table


def _pair_table(title: str, pairs: list[ExamplePair]) -> Table:
    from rich.table import Table

    table = Table(title=f"{title} ({len(pairs)})")
    for name in ("example", "task type", "gold", "base", "candidate", "turns (base, candidate)"):
        table.add_column(name, overflow="fold")
    for pair in pairs[:LIST_LIMIT]:
        cells = []
        for side in (pair["base"], pair["candidate"]):
            if side is None:
                cells.append("(not in run)")
            elif side["error"]:
                cells.append(f"error: {side['error'][:40]}")
            else:
                cells.append(side["prediction"][:40] or "(no answer)")
        turns = ", ".join(
            f"#{s['turn_id']}" if s and s["turn_id"] else _DASH for s in (pair["base"], pair["candidate"])
        )
        table.add_row(pair["example_id"], pair["task_type"], pair["gold"][:30], *cells, turns)
    if len(pairs) > LIST_LIMIT:
        table.caption = f"… and {len(pairs) - LIST_LIMIT} more (--json has them all)"
    return table


def _runs_table(comparison: Comparison) -> Table:
    """The two runs: id, dataset version, status, model, code version, review, own accuracy."""
    from rich.table import Table

    runs = Table(title=f"Comparison on dataset {comparison['dataset']}")
    for name in ("", "run id", "version", "status", "model", "code version", "review", "own accuracy"):
        # fold a long run id or model name onto more lines: cut to "…" it named nothing
        runs.add_column(name, overflow="fold")
    for label, side in (("base", comparison["base"]), ("candidate", comparison["candidate"])):
        runs.add_row(
            label,
            side["run_id"],
            str(side["dataset_version"]),
            side["status"],
            side["model"] or _DASH,
            side["code_version"] or _DASH,
            _DASH if side["review"] is None else ("on" if side["review"] else "off"),
            f"{_pct(side['accuracy'])} ({side['correct']}/{side['scored']})",
        )
    return runs


def _accuracy_table(comparison: Comparison) -> Table:
    """Paired accuracy overall and per task type, the counts in its caption."""
    from rich.table import Table

    bootstrap = "method" in comparison  # epochs or partial credit: evaluation.compare.over_epochs
    confidence = f"{comparison['confidence']:.0%} CI, pp ({'Agresti–Min' if bootstrap else 'Newcombe'})"
    accuracy = Table(title="Paired accuracy (examples both runs scored)")
    for name in ("", "examples", "base", "candidate", "difference", confidence, "fixed", "broken"):
        accuracy.add_column(name, justify="left" if not name else "right")
    accuracy.add_column("bootstrap p" if bootstrap else "McNemar p", justify="right")
    accuracy.add_column("Holm p", justify="right")
    accuracy.add_row(*_accuracy_row("overall", comparison["overall"], holm=False))
    for task_type, stats in comparison["per_task_type"].items():
        accuracy.add_row(*_accuracy_row(f"  {task_type}", stats, holm=True))
    counts = comparison["counts"]
    accuracy.caption = (
        (versions_note(comparison) or "")
        + ("\n" if versions_note(comparison) else "")
        + f"paired {counts['paired']}, scored by both {counts['scored_both']}, unscored in either "
        f"{counts['unscored']}, changed {counts['changed']}, only in base {counts['only_base']}, only in "
        f"candidate {counts['only_candidate']}; errored in either {counts['errored']} (counted as wrong)"
        + (f"; {comparison['method']}; fixed/broken by majority vote" if bootstrap else "")
        + (f"\noverall: {comparison['detectable']['note']}" if "detectable" in comparison else "")
    )
    return accuracy


#: A row of a delta section: label, base, candidate, difference — as text.
DeltaRow = tuple[str, str, str, str]


def accuracy_rows(comparison: Comparison) -> list[tuple[list[str], float | None]]:
    """The paired-accuracy rows, overall then per task type, as the CLI
    prints them (accuracies in %, the difference and its interval in pp,
    p-values to four places) with each row's difference (for colouring):
    ``[(cells, difference)]``; the admin's comparison page shows these."""
    rows = [
        (_accuracy_row("overall", comparison["overall"], holm=False), comparison["overall"]["difference"])
    ]
    for task_type, stats in comparison["per_task_type"].items():
        rows.append((_accuracy_row(task_type, stats, holm=True), stats["difference"]))
    return rows


def _delta_row(label: str, d: Delta, digits: int) -> DeltaRow:
    return (
        label,
        _num(d["base"], digits),
        _num(d["candidate"], digits),
        _num(d["difference"], digits, sign=True),
    )


def _rate_row(label: str, d: Delta) -> DeltaRow:
    return label, _pct(d["base"]), _pct(d["candidate"]), _pp(d["difference"])


def delta_sections(comparison: Comparison) -> list[tuple[str, list[DeltaRow]]]:
    """The deltas as ``[(title, rows)]``, every figure formatted for people:
    cost, tokens, steps and latency; stop reasons; review (accuracies in %,
    their differences in pp); the plugins' check pass rates (when there are
    checks). The CLI's tables and the admin's comparison page both show
    these, so they read alike."""
    m = comparison["metrics"]
    figures = [
        _delta_row("cost (USD)", m["cost"], 4),
        _delta_row("input tokens", m["input_tokens"], 0),
        _delta_row("output tokens", m["output_tokens"], 0),
        _delta_row("mean steps", m["steps_mean"], 2),
        _delta_row("latency p50 (ms)", m["latency_p50_ms"], 0),
        _delta_row("latency p95 (ms)", m["latency_p95_ms"], 0),
        _delta_row("errors", m["errors"], 0),
    ]
    stops = [_delta_row(reason or "(none)", d, 0) for reason, d in comparison["stop_reasons"].items()]
    review = [
        _rate_row(key.replace("_", " "), d)
        if "accuracy" in key or "rate" in key
        else _delta_row(key.replace("_", " "), d, 0)
        for key, d in comparison["review"].items()
    ]
    sections = [
        ("Cost, tokens, steps, latency (each run's own rows)", figures),
        ("Stop reasons", stops),
        ("Review", review),
    ]
    if comparison["checks"]:
        checks = [
            (
                name,
                _pct(c["base"]["pass_rate"]) if c["base"] else _DASH,
                _pct(c["candidate"]["pass_rate"]) if c["candidate"] else _DASH,
                _pp(c["difference"]),
            )
            for name, c in comparison["checks"].items()
        ]
        sections.append(("Checks: pass rate", checks))
    return sections


def _delta_tables(comparison: Comparison) -> list[Table]:
    """:func:`delta_sections` as rich tables."""
    tables = []
    for title, rows in delta_sections(comparison):
        table = _delta_table(title)
        for row in rows:
            table.add_row(*row)
        tables.append(table)
    return tables


def slice_rows(report: SliceReport) -> list[list[str]]:
    """The regression slices' rows as the CLI prints them (accuracies in %,
    the difference in pp, p and q to four places or in e-notation): slice,
    examples, base, candidate, difference, fixed, broken, p, q. The admin's
    comparison page shows these."""
    return [
        [
            r["slice"], str(r["examples"]), _pct(r["base_accuracy"]), _pct(r["candidate_accuracy"]),
            _pp(r["difference"]), str(r["fixed"]), str(r["broken"]), _p(r["p_value"]), _p(r["q_value"]),
        ]
        for r in report["regressions"]
    ]  # fmt: skip


def format_slices(report: SliceReport, *, width: int = 120) -> str:
    """The regression slices (``evaluation.compare.slices``) as a table: each
    slice where the candidate is worse below the FDR, with its counts,
    accuracies, difference, p and q; the number of slices tested under it."""
    from rich.table import Table

    table = Table(title=f"Regression slices: candidate worse, Benjamini–Hochberg q < {report['fdr']:g}")
    for name in ("slice", "examples", "base", "candidate", "difference", "fixed", "broken", "p", "q"):
        table.add_column(name, justify="left" if name == "slice" else "right")
    for row in slice_rows(report):
        table.add_row(*row)
    found = len(report["regressions"])
    table.caption = (
        f"{report['tested']} slices tested, {found} with the candidate worse at q < {report['fdr']:g}"
        + ("" if found else " (none)")
        + f"; {report['method']}"
    )
    from evaluation.metrics.metrics_table import text_console

    console, buffer = text_console(width)
    console.print(table)
    return buffer.getvalue()


def format_comparison(comparison: Comparison, *, width: int = 120) -> str:
    """Render ``comparison`` as plain-text tables: the two runs, paired
    accuracy overall and per task type (difference with its interval, fixed,
    broken, exact McNemar p and Holm-adjusted p), the counts kept apart, the
    deltas of cost, tokens, steps and latency, stop reasons, review and the
    plugins' checks, then the fixed, broken and errored examples, then the
    trajectory view (``evaluation.compare.trajectory_table``) — each table
    only when it has a row, and no run id or model name cut to nothing
    (long ones fold onto more lines within ``width``)."""
    runs = _runs_table(comparison)
    runs.caption = (
        "\n".join(w for w in (unfinished_warning(comparison), few_examples_warning(comparison)) if w) or None
    )
    tables = [runs, _accuracy_table(comparison), *(t for t in _delta_tables(comparison) if t.row_count)]
    # a list with nothing in it is left out, not printed as an empty table
    lists = (
        ("Fixed: wrong → right", comparison["fixed"]),
        ("Broken: right → wrong", comparison["broken"]),
        ("Errored in either run", comparison["errored"]),
    )
    tables += [_pair_table(title, pairs) for title, pairs in lists if pairs]
    if comparison.get("trajectory"):
        from evaluation.compare.trajectory_table import trajectory_tables

        tables += trajectory_tables(comparison["trajectory"])
    from evaluation.metrics.metrics_table import text_console

    console, buffer = text_console(width)
    for table in tables:
        console.print(table)
    return buffer.getvalue()
