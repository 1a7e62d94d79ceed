"""The comparison's trajectory view (issue 48): two runs' paths diffed
example by example, with paired tests on the paths.

Per example both runs ran with the same content: ``identical`` paths (the
same tools with the same arguments in the same order; ``final_answer`` and
``ask_user`` left out) or the first divergent step — which tool, or which
argument, differs. The tests:

- **trajectory pass** (the ``trajectory`` scorer's verdict, where both runs
  have one): the two-sided exact McNemar test on the discordant pairs, as
  for answers (``evaluation.compare.statistics.mcnemar_exact_p``);
- **step counts** (``Prediction.steps``, the agent loop's steps): the
  Wilcoxon signed-rank test, ``scipy.stats.wilcoxon`` (two-sided, zero
  differences dropped — its default ``zero_method="wilcox"``); no p-value
  when every difference is zero or fewer than one pair differs;
- both Holm-adjusted together with the answers' overall McNemar p-value
  (``holm_adjust``): three tests of one comparison.

Only epoch 1 of each example is compared (a run with epochs has one path per epoch).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.compare.statistics import holm_adjust, mcnemar_exact_p
from evaluation.models import Run
from evaluation.run.agent_path import agent_trajectories
from evaluation.scoring.trajectory_spec import PROTOCOL_TOOLS, TrajectoryStep


@dataclass(frozen=True)
class PathRow:
    """One run's epoch-1 prediction of an example, for the trajectory view."""

    example_key: int
    example_id: str
    prediction_id: int
    turn_id: int | None
    steps: int
    passed: bool | None


def path_rows(run: Run) -> list[PathRow]:
    """``run``'s epoch-1 predictions as :class:`PathRow` (one query)."""
    rows = run.predictions.filter(epoch=1).values_list(
        "example_id", "example__external_id", "pk", "turn_id", "steps", "trajectory_scores"
    )
    return [
        PathRow(key, ext, pk, turn, steps, ((scores or {}).get("trajectory") or {}).get("correct"))
        for key, ext, pk, turn, steps, scores in rows.order_by("example__position")
    ]


def first_divergence(base: Sequence[TrajectoryStep], candidate: Sequence[TrajectoryStep]) -> str:
    """``""`` when the two paths are the same calls in the same order, else
    the first difference in words ("step 2: A called search_documents, B
    called calculator"; "step 1: calculator's argument 'expression' is "2+2"
    in A, "3+3" in B"; "step 3: A stopped, B called sql_query")."""
    for n, (a, b) in enumerate(zip(base, candidate, strict=False), start=1):
        if a.tool != b.tool:
            return f"step {n}: A called {a.tool}, B called {b.tool}"
        for key in dict.fromkeys([*a.args, *b.args]):
            if a.args.get(key, _MISSING) != b.args.get(key, _MISSING):
                in_a, in_b = _show(a.args, key), _show(b.args, key)
                return f"step {n}: {a.tool}'s argument {key!r} is {in_a} in A, {in_b} in B"
    if len(base) != len(candidate):
        n = min(len(base), len(candidate)) + 1
        longer, who, other = (candidate, "B", "A") if len(candidate) > len(base) else (base, "A", "B")
        return f"step {n}: {other} stopped, {who} called {longer[n - 1].tool}"
    return ""


_MISSING = object()


def _show(args: dict[str, Any], key: str) -> str:
    return "absent" if key not in args else json.dumps(args[key], ensure_ascii=False)[:60]


def _calls(path: Sequence[TrajectoryStep]) -> list[TrajectoryStep]:
    return [step for step in path if step.tool not in PROTOCOL_TOOLS]


def _step_view(path: Sequence[TrajectoryStep]) -> list[dict[str, Any]]:
    return [{"tool": s.tool, "args": s.args} for s in path]


def wilcoxon_p(base_steps: Sequence[int], candidate_steps: Sequence[int]) -> float | None:
    """The two-sided Wilcoxon signed-rank p-value of paired step counts
    (``scipy.stats.wilcoxon``), ``None`` when no pair differs."""
    if not any(a != b for a, b in zip(base_steps, candidate_steps, strict=True)):
        return None
    from scipy.stats import wilcoxon

    return float(wilcoxon(base_steps, candidate_steps).pvalue)


def _diff_examples(
    base: list[PathRow], candidate: list[PathRow], paths: dict[int, list[TrajectoryStep]]
) -> tuple[list[dict[str, Any]], list[tuple[PathRow, PathRow]], dict[str, int]]:
    by_b = {r.example_id: r for r in base}
    by_c = {r.example_id: r for r in candidate}
    diverged, paired = [], []
    counts = {"identical": 0, "diverged": 0, "only_base": 0, "only_candidate": 0, "changed": 0}
    for example_id in [*by_b, *(e for e in by_c if e not in by_b)]:
        b, c = by_b.get(example_id), by_c.get(example_id)
        if b is None or c is None:
            counts["only_base" if c is None else "only_candidate"] += 1
            continue
        if b.example_key != c.example_key:
            counts["changed"] += 1
            continue
        paired.append((b, c))
        pb = _calls(paths.get(b.turn_id, []) if b.turn_id else [])
        pc = _calls(paths.get(c.turn_id, []) if c.turn_id else [])
        where = first_divergence(pb, pc)
        counts["diverged" if where else "identical"] += 1
        if where:
            diverged.append(
                {
                    "example_id": example_id,
                    "first_divergence": where,
                    "base": {
                        "turn_id": b.turn_id,
                        "steps": b.steps,
                        "path": _step_view(pb),
                        "passed": b.passed,
                    },
                    "candidate": {
                        "turn_id": c.turn_id,
                        "steps": c.steps,
                        "path": _step_view(pc),
                        "passed": c.passed,
                    },
                }
            )
    return diverged, paired, counts


def trajectory_comparison(*, base: Run, candidate: Run, answer_p: float | None) -> dict[str, Any]:
    """The trajectory view of ``candidate`` against ``base`` (see the module):
    ``counts``, ``diverged`` (each with both paths), ``trajectory_pass``
    (the 2×2 counts, ``p_value``, ``p_holm``), ``steps`` (``base_mean``,
    ``candidate_mean``, ``pairs``, ``p_value``, ``p_holm``) and ``answer_p_holm``.
    Two queries for the rows, one for every path."""
    base_rows, candidate_rows = path_rows(base), path_rows(candidate)
    turn_ids = [r.turn_id for r in [*base_rows, *candidate_rows] if r.turn_id is not None]
    paths = agent_trajectories(turn_ids)
    diverged, paired, counts = _diff_examples(base_rows, candidate_rows, paths)
    judged = [(b.passed, c.passed) for b, c in paired if b.passed is not None and c.passed is not None]
    fixed = sum(1 for b, c in judged if not b and c)
    broken = sum(1 for b, c in judged if b and not c)
    pass_p = mcnemar_exact_p(fixed=fixed, broken=broken) if judged else None
    steps_b, steps_c = [b.steps for b, _ in paired], [c.steps for _, c in paired]
    steps_p = wilcoxon_p(steps_b, steps_c) if paired else None
    answer_holm, pass_holm, steps_holm = holm_adjust([answer_p, pass_p, steps_p])
    return {
        "counts": counts,
        "diverged": diverged,
        "trajectory_pass": {
            "pairs": len(judged),
            "base_passed": sum(1 for b, _ in judged if b),
            "candidate_passed": sum(1 for _, c in judged if c),
            "fixed": fixed,
            "broken": broken,
            "p_value": pass_p,
            "p_holm": pass_holm,
        },
        "steps": {
            "pairs": len(paired),
            "base_mean": sum(steps_b) / len(steps_b) if steps_b else None,
            "candidate_mean": sum(steps_c) / len(steps_c) if steps_c else None,
            "p_value": steps_p,
            "p_holm": steps_holm,
        },
        "answer_p_holm": answer_holm,
    }
