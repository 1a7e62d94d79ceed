"""An experiment's leaderboard as plain-text tables (what ``manage.py
leaderboard`` and ``run_experiment`` print), drawn with ``rich`` like the
metrics and comparison tables.

Presentation only: it reads the typed leaderboard
(``evaluation.experiments.ranking.Leaderboard``), the same values
``leaderboard_json`` writes with ``--json``, so what is printed and what is
written are the same figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from evaluation.experiments.ranking import Leaderboard, VariantRow

if TYPE_CHECKING:
    # rich is imported where a table is built: the admin's leaderboard page
    # imports this module for its marks and legend at every command's start
    from rich.table import Table

__all__ = ["FRONTIER_MARK", "TOP_MARK", "format_leaderboard", "leaderboard_text", "legend", "trajectory_text"]

_DASH = "—"
#: The marks of the top group and of the Pareto frontier.
TOP_MARK = "▲ top"
FRONTIER_MARK = "◆"


def _pct(value: float | None) -> str:
    return _DASH if value is None else f"{value * 100:.1f}%"


def pp_text(value: float | None) -> str:
    """A difference of accuracies in percentage points, ``+2.5 pp``; a tie
    is ``+0.0 pp``, never ``-0.0 pp``."""
    if value is None:
        return _DASH
    points = value * 100
    return f"{0.0 if abs(points) < 0.05 else points:+.1f} pp"


def _p(value: float | None) -> str:
    if value is None:
        return _DASH
    return f"{value:.4f}" if value >= 0.0001 else f"{value:.1e}"


def _usd(value: float | None) -> str:
    if value is None:
        return _DASH
    # a cost per correct answer of $0.00004 is not "$0.0000"
    return f"${value:,.4f}" if value >= 0.001 or value == 0 else f"${value:.2g}"


def _seconds(value: float | None) -> str:
    return _DASH if value is None else f"{value:.2f}"


def _accuracy(v: VariantRow) -> str:
    if v.accuracy is None:
        return f"{_DASH} (0 scored)"
    if v.ci_low is None or v.ci_high is None:
        return _pct(v.accuracy)
    return f"{_pct(v.accuracy)} ({v.ci_low * 100:.1f}–{v.ci_high * 100:.1f}%)"


def trajectory_text(v: VariantRow) -> str:
    """The variant's trajectory pass rate with its 95 % Wilson interval and
    n, ``—`` when it has no trajectory verdict."""
    t = v.trajectory
    if not t or t.get("accuracy") is None:
        return _DASH
    if t.get("ci_low") is None or t.get("ci_high") is None:
        return f"{_pct(t['accuracy'])} n={t['n']}"
    return f"{_pct(t['accuracy'])} ({t['ci_low'] * 100:.1f}–{t['ci_high'] * 100:.1f}%) n={t['n']}"


def goal_cells(v: VariantRow) -> list[str]:
    """A variant's simulated users: the goal success rate and the mean turns
    to the goal (``metrics["conversations"]["goal"]``; its Wilson interval is
    the accuracy's when every example is a simulated user's)."""
    goal = (v.conversations or {}).get("goal")
    if not goal:
        return [_DASH]
    turns = goal.get("mean_turns_to_goal")
    return [f"{_pct(goal.get('accuracy'))} · {_DASH if turns is None else f'{turns:.2f}'}"]


def _marks(v: VariantRow) -> str:
    return " ".join(m for m, on in ((TOP_MARK, v.top_group), (FRONTIER_MARK, v.pareto)) if on)


def _pass_at_k(v: VariantRow) -> str:
    if not v.pass_at_k:
        return _DASH
    return _pct(v.pass_at_k.get(str(v.epochs)))


def _variants_table(board: Leaderboard) -> Table:
    """One row per variant, best first, the unranked after."""
    from rich.table import Table

    epochs = max((v.epochs for v in board.variants), default=1)
    title = (
        f"Leaderboard · {board.experiment} · dataset {board.dataset}@{board.dataset_version}"
        f" · alpha {board.alpha:g} · ranked by {board.rank_by}"
    )
    table = Table(title=title)
    columns = ["#", "", "variant", "status", "accuracy (95% CI)", "n"]
    columns += [f"pass@{epochs}"] if epochs > 1 else []
    paths = any(v.trajectory for v in board.variants)
    columns += ["trajectory pass (95% CI)"] if paths else []
    goals = any((v.conversations or {}).get("goal") for v in board.variants)
    columns += ["goal success · turns"] if goals else []
    columns += ["cost", "$ / correct", "tokens in / out", "p50 / p95 s", "errors", "stop reasons"]
    for name in columns:
        table.add_column(
            name, justify="left" if name in ("", "variant", "status", "stop reasons") else "right"
        )
    for v in board.variants:
        cells = [str(v.rank or _DASH), _marks(v), v.name, v.status, _accuracy(v), str(v.n)]
        cells += [_pass_at_k(v)] if epochs > 1 else []
        cells += [trajectory_text(v)] if paths else []
        cells += goal_cells(v) if goals else []
        cells += [
            _usd(v.cost),
            _usd(v.cost_per_correct),
            f"{v.tokens['input']:,} / {v.tokens['output']:,}",
            f"{_seconds(v.latency_p50_s)} / {_seconds(v.latency_p95_s)}",
            str(v.errors),
            ", ".join(f"{reason} {n}" for reason, n in v.stop_reasons.items()) or _DASH,
        ]
        table.add_row(*cells)
    return table


def _task_type_table(variants: Sequence[VariantRow]) -> Table | None:
    """Accuracy per task type: a row per variant, a column per task type."""
    from rich.table import Table

    task_types = sorted({t for v in variants for t in v.per_task_type})
    if not task_types:
        return None
    table = Table(title="Accuracy per task type")
    table.add_column("variant")
    for task_type in task_types:
        table.add_column(task_type, justify="right")
    for v in variants:
        cells = []
        for task_type in task_types:
            b = v.per_task_type.get(task_type)
            cells.append(f"{_pct(b['accuracy'])} (n={b['n']})" if b else _DASH)
        table.add_row(v.name, *cells)
    return table


def _matrix(board: Leaderboard) -> Table | None:
    """Row − column accuracy on the examples both scored, with its
    Holm-adjusted p; the upper triangle, rows and columns in rank order."""
    from rich.table import Table

    ranked = [v.name for v in board.variants if v.rank is not None]
    if len(ranked) < 2:
        return None
    pairs = {(p.a, p.b): p for p in board.pairs}
    what = "trajectory pass" if board.rank_by == "trajectory" else "accuracy"
    title = f"Pairs: row − column {what} on the examples both scored, Holm-adjusted p"
    table = Table(title=title, min_width=len(title))
    table.add_column("")
    for name in ranked[1:]:
        table.add_column(name, justify="right")
    for i, a in enumerate(ranked[:-1]):
        cells = []
        for j, b in enumerate(ranked[1:], start=1):
            pair = pairs.get((a, b))
            if j <= i or pair is None:
                cells.append("")
                continue
            star = " *" if pair.p_holm is not None and pair.p_holm < board.alpha else ""
            could = f"\n±{pair.detectable * 100:.1f} pp" if pair.detectable is not None else "\n± —"
            cells.append(f"{pp_text(pair.difference)}\np={_p(pair.p_holm)}{star} n={pair.n}{could}")
        table.add_row(a, *cells)
    return table


def legend(board: Leaderboard) -> str:
    """What the marks and the pairs' p-values mean, in one line."""
    tests = sorted({p.test for p in board.pairs})
    test = " / ".join(tests) if tests else "exact McNemar"
    on = (
        "the examples both have a trajectory verdict for"
        if board.rank_by == "trajectory"
        else "the examples both scored"
    )
    return (
        f"{TOP_MARK}: not significantly worse than the best (Holm-adjusted p ≥ {board.alpha:g}, or not "
        f"worse); {FRONTIER_MARK}: Pareto frontier, no other variant at least as accurate for at most the "
        f"cost; pairs: {test} on {on} (McNemar 1947; with epochs the paired bootstrap), "
        f"p Holm (1979)-adjusted across all {len(board.pairs)} pairs, * below alpha; ± the smallest "
        "difference the pair could detect with 80% power (exact McNemar at alpha over the pairs); "
        "intervals: 95% Wilson (with epochs: bootstrap)"
        + ("; ranked by trajectory pass (pairs on epoch 1)." if board.rank_by == "trajectory" else ".")
    )


def _notes(board: Leaderboard) -> list[str]:
    unranked = [v for v in board.variants if v.rank is None]
    ranked = len(board.variants) - len(unranked)
    notes = []
    if unranked:
        listed = ", ".join(f"{v.name} ({v.status})" for v in unranked)
        notes.append(f"not ranked (not finished): {listed}")
    if board.cost_unknown:
        notes.append(f"cost unknown, so not on the frontier: {', '.join(board.cost_unknown)}")
    costs = [v for v in board.variants if v.cost_ci and v.cost_per_example is not None]
    if costs:
        notes.append("cost per example, 95% bootstrap interval: " + "; ".join(
            f"{v.name} ${v.cost_per_example:.5f} (${v.cost_ci[0]:.5f}–${v.cost_ci[1]:.5f})"
            for v in costs if v.cost_ci and v.cost_per_example is not None))  # fmt: skip
    if board.frontier_undecided:
        notes.append(
            "frontier place not decided by the intervals (more examples could move it): "
            + ", ".join(board.frontier_undecided)
        )
    notes.extend(stopping_notes(board))
    if ranked == 1:
        notes.append("one finished variant: no pairs to compare")
    elif ranked == 0:
        notes.append("no variant has finished: nothing is ranked")
    return notes


def stopping_notes(board: Leaderboard) -> list[str]:
    """``run_experiment --stop-when-decided``: where the experiment stopped
    and which pairs were decided early, at how many examples (none without it)."""
    from evaluation.experiments.stopping import decided_early_at

    record = board.stopped_early
    if not record:
        return []
    if record["stopped_early"]:
        head = (
            f"stopped early at {record['examples']} of {record['of']} examples: the top group is decided "
            f"(confidence sequence, margin ±{record['margin'] * 100:g} pp); the other "
            f"{record['of'] - record['examples']} examples are not run (not counted)"
        )
    else:
        head = f"driven in rounds of {record['batch_size']} to all {record['of']} examples: not decided early"
    lines = [head]
    for pair in board.pairs:
        at = decided_early_at(record, pair.a, pair.b)
        if at is not None:
            seq = next(q for q in record["pairs"] if {q["a"], q["b"]} == {pair.a, pair.b})
            lines.append(
                f"  {seq['a']} vs {seq['b']}: {seq['verdict']}, decided early at {at} "
                f"examples (difference in [{pp_text(seq['low'])}, {pp_text(seq['high'])}])"
            )
    return lines


def format_leaderboard(board: Leaderboard, *, width: int = 150) -> str:
    """Render a leaderboard as plain text
    ``width`` columns wide: the variants best first with the top group
    (``▲ top``) and the frontier (``◆``) marked, accuracy per task type, the
    pairwise matrix, notes (unranked variants, unknown costs) and the legend."""
    tables = [_variants_table(board), _task_type_table(board.variants), _matrix(board)]
    from evaluation.metrics.metrics_table import text_console

    console, buffer = text_console(width)
    for table in tables:
        if table is not None:
            console.print(table)
    for note in _notes(board):
        console.print(note)
    console.print(legend(board))
    return buffer.getvalue()


def leaderboard_text(board: Leaderboard, *, width: int = 150) -> str:
    """``board`` as plain-text tables (``manage.py leaderboard`` and
    ``run_experiment`` print it): ``format_leaderboard``."""
    return format_leaderboard(board, width=width)
