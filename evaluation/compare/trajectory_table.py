"""The comparison's trajectory view as text (``compare_runs``) and the one
sentence it comes to. Presentation only: the figures are
``evaluation.compare.trajectory_view.trajectory_comparison``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

#: Diverged examples listed; the rest are counted.
LIST_LIMIT = 30
_DASH = "—"


def _p(value: float | None) -> str:
    if value is None:
        return _DASH
    return f"{value:.4f}" if value >= 0.0001 else f"{value:.1e}"


def _mean(value: float | None) -> str:
    return _DASH if value is None else f"{value:.2f}"


def path_text(path: Sequence[Mapping[str, Any]]) -> str:
    """A path on one line: ``calculator(expression=2+2) → search_documents(query=…)``."""
    if not path:
        return "(no tool call)"
    parts = []
    for step in path:
        args = ", ".join(f"{k}={v}" for k, v in (step.get("args") or {}).items())
        parts.append(f"{step['tool']}({args[:40] + '…' if len(args) > 40 else args})")
    return " → ".join(parts)


def steps_sentence(view: Mapping[str, Any]) -> str:
    """What the step counts say, in one sentence: "B takes fewer steps than A
    (mean 2.00 vs 3.00 over 40 examples), Wilcoxon signed-rank p = 0.0012
    (Holm-adjusted 0.0036)"; or that they do not differ."""
    steps = view["steps"]
    a, b = steps["base_mean"], steps["candidate_mean"]
    if a is None or b is None or steps["p_value"] is None:
        return "step counts: no paired example differs"
    how = "fewer" if b < a else "more" if b > a else "as many"
    return (
        f"B takes {how} steps than A (mean {_mean(b)} vs {_mean(a)} over {steps['pairs']} examples), "
        f"Wilcoxon signed-rank p = {_p(steps['p_value'])} (Holm-adjusted {_p(steps['p_holm'])})"
    )


def trajectory_tables(view: Mapping[str, Any]) -> list[Table]:
    """The "Trajectories" summary and the "Diverged paths" list (``rich`` tables)."""
    from rich.table import Table

    counts, passed = view["counts"], view["trajectory_pass"]
    summary = Table(title="Trajectories (A = base, B = candidate)", show_header=False)
    summary.add_column("figure")
    summary.add_column("value")
    summary.add_row(
        "paths",
        f"{counts['identical']} identical, {counts['diverged']} diverged, {counts['only_base']} only in A, "
        f"{counts['only_candidate']} only in B, {counts['changed']} changed examples",
    )
    if passed["pairs"]:
        summary.add_row(
            "trajectory pass",
            f"A {passed['base_passed']}/{passed['pairs']}, B {passed['candidate_passed']}/{passed['pairs']}; "
            f"fixed {passed['fixed']}, broken {passed['broken']}; exact McNemar p = {_p(passed['p_value'])} "
            f"(Holm {_p(passed['p_holm'])})",
        )
    summary.add_row("steps", steps_sentence(view))
    summary.add_row("answers", f"Holm-adjusted with the two tests above: p = {_p(view.get('answer_p_holm'))}")
    diverged = Table(title=f"Diverged paths ({len(view['diverged'])})")
    for column in ("example", "first divergence", "A's path", "B's path"):
        diverged.add_column(column, overflow="fold")
    for item in view["diverged"][:LIST_LIMIT]:
        diverged.add_row(
            item["example_id"],
            item["first_divergence"],
            path_text(item["base"]["path"]),
            path_text(item["candidate"]["path"]),
        )
    if len(view["diverged"]) > LIST_LIMIT:
        diverged.caption = f"… and {len(view['diverged']) - LIST_LIMIT} more"
    return [summary, *([diverged] if view["diverged"] else [])]


def trajectory_page(view: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the admin's comparison page shows of the trajectory view: the
    counts, the pass test and the steps in sentences, and each diverged
    example with both paths as lists of calls; ``None`` without a view."""
    if not view:
        return None
    passed = view["trajectory_pass"]
    return {
        "counts": view["counts"],
        "pass_line": (
            f"trajectory pass: base {passed['base_passed']}/{passed['pairs']}, candidate "
            f"{passed['candidate_passed']}/{passed['pairs']}; fixed {passed['fixed']}, broken "
            f"{passed['broken']}; exact McNemar p = {_p(passed['p_value'])} (Holm {_p(passed['p_holm'])})"
            if passed["pairs"]
            else "trajectory pass: no example has a trajectory verdict in both runs"
        ),
        "steps_line": steps_sentence(view).replace("B ", "the candidate ", 1).replace(" A ", " the base ", 1),
        "answer_line": f"answers, Holm-adjusted with these two tests: p = {_p(view.get('answer_p_holm'))}",
        "diverged": [
            {
                "example_id": item["example_id"],
                "first_divergence": item["first_divergence"],
                "sides": [
                    {
                        "steps": item[side]["steps"],
                        "passed": item[side]["passed"],
                        "calls": [path_text([step]) for step in item[side]["path"]],
                    }
                    for side in ("base", "candidate")
                ],
            }
            for item in view["diverged"]
        ],
    }
