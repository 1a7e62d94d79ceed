"""A run, a comparison or an experiment as a GitHub-flavoured Markdown summary:
what a pull request's checks page (``$GITHUB_STEP_SUMMARY``) or a merge
request comment shows (docs/evaluating.md#ci-reports).

Pure: plain values in (a run's stored ``metrics``, a ``Comparison``, a
leaderboard as ``leaderboard_json`` gives it), a string out; no Django.
Fixed and broken examples are listed up to ``MAX_EXAMPLES`` each, then
counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluation.compare.pairing import regressions
from evaluation.compare.shapes import Comparison, ExamplePair, PairedAccuracy
from evaluation.metrics.intervals import wilson_interval

__all__ = [
    "MAX_EXAMPLES",
    "RunHeading",
    "comparison_lines",
    "comparison_summary_md",
    "experiment_summary_md",
    "run_summary_md",
]

#: At most this many fixed (and as many broken) examples are listed.
MAX_EXAMPLES = 20

_DASH = "—"


@dataclass(frozen=True)
class RunHeading:
    """What the summary's title and gate say about one run: its id, dataset
    (name, version) and ``subset``, model, the gate's failures (``[]``: passed; ``gated``
    says whether any gate was asked for) and links (label, URL)."""

    run_id: str
    dataset: str
    dataset_version: int
    model: str
    failures: Sequence[str] = ()
    gated: bool = False
    links: Sequence[tuple[str, str]] = field(default_factory=tuple)
    #: the run's subset in words (``split dev, tag hard``), ``""``: the whole dataset
    subset: str = ""


def _text(text: Any) -> str:
    """Inline text: one line, ``\\`` and ``|`` escaped (a table cell ends at ``|``)."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|")


def _cell(text: Any) -> str:
    """A table cell: ``_text`` cut to at most 80 characters."""
    value = " ".join(str(text).split())
    return _text(value[:79] + "…" if len(value) > 80 else value)


def _code(text: Any) -> str:
    """A code span: one line, at most 80 characters, ``|`` escaped (GitHub's
    tables read ``\\|`` as a pipe even in code); double backticks around a
    value that holds one."""
    value = " ".join(str(text).split())
    value = (value[:79] + "…" if len(value) > 80 else value).replace("|", "\\|")
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def _pct(value: float | None) -> str:
    return _DASH if value is None else f"{value * 100:.1f}%"


def _ci(low: float | None, high: float | None) -> str:
    return _DASH if low is None or high is None else f"{low * 100:.1f}–{high * 100:.1f}%"


def _points(value: float | None) -> str:
    return _DASH if value is None else f"{value * 100:+.1f} pts"


def _p(value: float | None) -> str:
    return _DASH if value is None else f"{value:.3g}"


def _accuracy_row(label: str, block: Mapping[str, Any]) -> str:
    correct, scored = int(block.get("correct", 0)), int(block.get("scored", 0))
    interval = wilson_interval(correct, scored)
    low, high = interval if interval is not None else (None, None)
    accuracy = correct / scored if scored else None
    return (
        f"| {label} | {_pct(accuracy)} | {_ci(low, high)} | {correct} / {scored} "
        f"| {int(block.get('total', 0)) - scored} | {block.get('total', 0)} |"
    )


def metrics_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The metrics table: accuracy with its 95 % Wilson interval per task
    type and over all, then errors, steps, tokens, cost and latency."""
    lines = [
        "| task type | accuracy | 95% CI | correct / scored | unscored | total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for task_type, block in (metrics.get("per_task_type") or {}).items():
        lines.append(_accuracy_row(_code(task_type), block))
    lines.append(_accuracy_row("**all**", metrics))
    tokens = metrics.get("tokens") or {}
    latency = metrics.get("latency_ms") or {}
    cost = metrics.get("cost")
    steps = metrics.get("steps_mean")
    lines += [
        "",
        "| errors | mean steps | tokens in / out | cost | latency p50 / p95 |",
        "|---:|---:|---:|---:|---:|",
        f"| {metrics.get('errors', 0)} | {_DASH if steps is None else f'{steps:.2f}'} "
        f"| {tokens.get('input', 0):,} / {tokens.get('output', 0):,} "
        f"| {_DASH if cost is None else f'${cost:,.4f}'} "
        f"| {_ms(latency.get('p50'))} / {_ms(latency.get('p95'))} |",
    ]
    return lines


def _ms(value: float | None) -> str:
    return _DASH if value is None else f"{value:,.0f} ms"


def _pair_line(pair: ExamplePair) -> str:
    answer = pair["candidate"]["prediction"] if pair["candidate"] else ""
    before = pair["base"]["prediction"] if pair["base"] else ""
    return (
        f"| {_code(pair['example_id'])} | {_cell(pair['task_type'])} | {_cell(pair['gold'])} "
        f"| {_cell(before)} | {_cell(answer)} |"
    )


def _pairs_lines(title: str, pairs: Sequence[ExamplePair], limit: int) -> list[str]:
    lines = [f"#### {title} ({len(pairs)})", ""]
    if not pairs:
        return [*lines, "None.", ""]
    lines += ["| example | task type | gold | base answer | candidate answer |", "|---|---|---|---|---|"]
    lines += [_pair_line(pair) for pair in pairs[:limit]]
    if len(pairs) > limit:
        lines += ["", f"… and {len(pairs) - limit} more."]
    return [*lines, ""]


def _paired_text(stats: PairedAccuracy) -> str:
    return (
        f"accuracy {_pct(stats['base_accuracy'])} → {_pct(stats['candidate_accuracy'])} "
        f"({_points(stats['difference'])}, 95% CI {_points(stats['ci_low'])} to {_points(stats['ci_high'])}; "
        f"{stats['fixed']} fixed, {stats['broken']} broken of {stats['examples']} paired), "
        f"exact McNemar p = {_p(stats['p_value'])}"
    )


def comparison_lines(comparison: Comparison, *, alpha: float, limit: int = MAX_EXAMPLES) -> list[str]:
    """A comparison's verdict (``regressions`` at ``alpha``), its paired
    accuracy per task type, and the fixed and broken examples."""
    base, candidate = comparison["base"]["run_id"], comparison["candidate"]["run_id"]
    found = regressions(comparison, alpha=alpha)
    verdict = "**significant regression**" if found else "no significant regression"
    lines = [
        f"Against {_code(base)}: {_paired_text(comparison['overall'])} — {verdict} at α = {alpha:g}.",
        *(f"- {_text(line)}" for line in found),
        "",
        "| task type | paired | base | candidate | difference (95% CI) | p | p (Holm) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for task_type, s in comparison["per_task_type"].items():
        lines.append(
            f"| {_code(task_type)} | {s['examples']} "
            f"| {_pct(s['base_accuracy'])} | {_pct(s['candidate_accuracy'])} "
            f"| {_points(s['difference'])} ({_points(s['ci_low'])} to {_points(s['ci_high'])}) "
            f"| {_p(s['p_value'])} | {_p(s['p_holm'])} |"
        )
    lines += ["", f"{_code(base)} → {_code(candidate)}:", ""]
    lines += _pairs_lines("Fixed", comparison["fixed"], limit)
    lines += _pairs_lines("Broken", comparison["broken"], limit)
    return lines


def _gate_line(heading: RunHeading) -> str:
    if heading.failures:
        return "**Gate: ❌ failed** — " + "; ".join(_text(f) for f in heading.failures)
    return (
        "**Gate: ✅ passed**"
        if heading.gated
        else "Gate: none asked for (no --fail-under, no --fail-on-regression)."
    )


def _links(links: Sequence[tuple[str, str]]) -> list[str]:
    return [" · ".join(f"[{_cell(label)}]({url})" for label, url in links), ""] if links else []


def run_summary_md(
    heading: RunHeading,
    metrics: Mapping[str, Any],
    *,
    comparison: Comparison | None = None,
    alpha: float = 0.05,
    note: str = "",
) -> str:
    """``run_eval``'s summary: the title, the gate's verdict, the metrics
    table, with ``comparison`` (``--baseline``) the verdict with its p-value
    and the fixed and broken examples, ``note`` (why a comparison was
    skipped), then the links."""
    lines = [
        f"### AgentLab run {_code(heading.run_id)}",
        "",
        f"Dataset {_code(heading.dataset)} v{heading.dataset_version}"
        + (f" ({_text(heading.subset)})" if heading.subset else "")
        + f", model {_code(heading.model or _DASH)}.",
        "",
        _gate_line(heading),
        "",
        *metrics_lines(metrics),
        "",
    ]
    if comparison is not None:
        lines += comparison_lines(comparison, alpha=alpha)
    elif note:
        lines += [_text(note), ""]
    lines += _links(heading.links)
    return "\n".join(lines)


def comparison_summary_md(
    comparison: Comparison, *, alpha: float = 0.05, links: Sequence[tuple[str, str]] = ()
) -> str:
    """``compare_runs``' summary: the two runs, the verdict with its p-value,
    the paired accuracy per task type, the fixed and broken examples."""
    lines = [
        f"### AgentLab comparison {_code(comparison['base']['run_id'])} → "
        f"{_code(comparison['candidate']['run_id'])}",
        "",
        f"Dataset {_code(comparison['dataset'])}; "
        f"{comparison['counts']['scored_both']} examples scored by both runs, "
        f"{len(comparison['changed'])} changed, {len(comparison['only_base'])} only in the base, "
        f"{len(comparison['only_candidate'])} only in the candidate.",
        "",
        *comparison_lines(comparison, alpha=alpha),
        *_links(links),
    ]
    return "\n".join(lines)


def _variant_line(v: Mapping[str, Any]) -> str:
    cost = v.get("cost")
    per = v.get("cost_per_correct")
    return (
        f"| {v.get('rank') or _DASH} | {_code(v['name'])}{' ★' if v.get('top_group') else ''} "
        f"| {_pct(v.get('accuracy'))} | {_ci(v.get('ci_low'), v.get('ci_high'))} "
        f"| {v.get('correct', 0)} / {v.get('n', 0)} "
        f"| {_DASH if cost is None else f'${cost:,.4f}'} | {_DASH if per is None else f'${per:,.4f}'} "
        f"| {v.get('errors', 0)} | {_cell(v.get('status', ''))} |"
    )


def experiment_summary_md(
    board: Mapping[str, Any],
    *,
    comparisons: Sequence[tuple[str, Comparison]] = (),
    failures: Sequence[str] = (),
    links: Sequence[tuple[str, str]] = (),
) -> str:
    """``run_experiment``'s summary: the leaderboard (``leaderboard_json``:
    rank, variant — ★ in the top group —, accuracy with its interval, cost,
    cost per correct answer, errors), the gate, and each variant compared
    with the file's baseline variant (``comparisons``: variant name and its
    ``Comparison``)."""
    lines = [
        f"### AgentLab experiment {_code(board['experiment'])}",
        "",
        f"Dataset {_code(board['dataset'])} v{board['dataset_version']}; "
        f"★ tied for first at α = {board['alpha']:g}.",
        "",
        "**Gate: ❌ failed** — " + "; ".join(_text(f) for f in failures)
        if failures
        else "**Gate: ✅ passed**",
        "",
        "| rank | variant | accuracy | 95% CI | correct / n | cost | per correct | errors | status |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
        *(_variant_line(v) for v in board["variants"]),
        "",
    ]
    for name, comparison in comparisons:
        lines += [
            f"#### Variant {_code(name)}",
            "",
            *comparison_lines(comparison, alpha=float(board["alpha"])),
        ]
    lines += _links(links)
    return "\n".join(lines)
