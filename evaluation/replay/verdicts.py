"""A replayed turn against its original, and a replay's figures — pure
functions over plain values (docs/evaluating.md#replaying-recorded-turns).

A turn's verdict: ``diverged`` at step *k* when the new agent's path of tool
calls (the protocol's ``final_answer`` / ``ask_user`` left out) first differs
from the recorded one at its *k*-th call (1-based) — another call, or one
path ending before the other; else ``identical`` when the outcome and the
answer (or the clarifying question) are the same, ``new_answer`` when not.

A replay's figures: how many turns, the share identical with its 95 %
Wilson interval, the divergence steps' distribution, and — over the turns
whose original and new answer were both scored — the paired 2×2 table with
the exact McNemar p-value and Newcombe's interval of the accuracy's change
(``evaluation.compare.statistics``, the tests ``compare_runs`` uses).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.compare.statistics import PairedTable, mcnemar_exact_p, newcombe_paired_interval
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import ReplayVerdict
from evaluation.scoring.trajectory_spec import PROTOCOL_TOOLS, TrajectoryStep

#: ``matches(new, recorded)``: whether a new call asks for what a recorded one did
StepMatch = Callable[[TrajectoryStep, TrajectoryStep], bool]


@dataclass(frozen=True)
class Answer:
    """What a turn ended with: its outcome, answer and clarifying question."""

    outcome: str
    answer: str = ""
    question: str = ""


def path_calls(path: Iterable[TrajectoryStep]) -> list[TrajectoryStep]:
    """``path`` without the protocol's own calls (``final_answer``, ``ask_user``)."""
    return [step for step in path if step.tool not in PROTOCOL_TOOLS]


def turn_verdict(
    *,
    original: Sequence[TrajectoryStep],
    new: Sequence[TrajectoryStep],
    original_answer: Answer,
    new_answer: Answer,
    matches: StepMatch,
) -> tuple[str, int | None]:
    """``(verdict, divergence step)``: ``("diverged", k)``, or
    ``("identical" | "new_answer", None)`` (see the module docstring)."""
    recorded, replayed = path_calls(original), path_calls(new)
    for position, (want, got) in enumerate(zip(recorded, replayed, strict=False), start=1):
        if not matches(got, want):
            return ReplayVerdict.DIVERGED, position
    if len(recorded) != len(replayed):
        return ReplayVerdict.DIVERGED, min(len(recorded), len(replayed)) + 1
    if original_answer == new_answer:
        return ReplayVerdict.IDENTICAL, None
    return ReplayVerdict.NEW_ANSWER, None


@dataclass(frozen=True)
class ItemFigures:
    """One replayed turn as the summary counts it: its verdict, divergence
    step, and the original's and the new answer's correctness (``None``: not scored)."""

    verdict: str
    divergence_step: int | None = None
    original_correct: bool | None = None
    correct: bool | None = None


def replay_summary(items: Sequence[ItemFigures]) -> dict[str, Any]:
    """The replay's figures as JSON (``Replay.summary``): ``turns``,
    ``identical``, ``new_answer``, ``diverged`` (counts),
    ``identical_share`` and its ``identical_interval`` (Wilson, ``None``
    without turns), ``divergence_steps`` (``{"k": count}`` in step order),
    and ``paired`` (``None`` when no turn was scored both times):
    ``n``, ``original_correct``, ``new_correct``, ``fixed``, ``broken``,
    ``p_value`` (exact McNemar), ``difference`` and its ``interval`` (Newcombe)."""
    verdicts = Counter(item.verdict for item in items)
    steps = Counter(item.divergence_step for item in items if item.divergence_step is not None)
    n = len(items)
    identical = verdicts[ReplayVerdict.IDENTICAL]
    interval = wilson_interval(identical, n) if n else None
    return {
        "turns": n,
        "identical": identical,
        "new_answer": verdicts[ReplayVerdict.NEW_ANSWER],
        "diverged": verdicts[ReplayVerdict.DIVERGED],
        "identical_share": identical / n if n else None,
        "identical_interval": list(interval) if interval is not None else None,
        "divergence_steps": {str(step): steps[step] for step in sorted(steps)},
        "paired": _paired(items),
    }


def _paired(items: Sequence[ItemFigures]) -> dict[str, Any] | None:
    pairs = [
        (item.original_correct, item.correct)
        for item in items
        if item.original_correct is not None and item.correct is not None
    ]
    if not pairs:
        return None
    table = PairedTable(
        both_right=sum(1 for before, after in pairs if before and after),
        broken=sum(1 for before, after in pairs if before and not after),
        fixed=sum(1 for before, after in pairs if not before and after),
        both_wrong=sum(1 for before, after in pairs if not before and not after),
    )
    interval = newcombe_paired_interval(table)
    return {
        "n": table.n,
        "original_correct": table.base_correct,
        "new_correct": table.candidate_correct,
        "fixed": table.fixed,
        "broken": table.broken,
        "p_value": mcnemar_exact_p(fixed=table.fixed, broken=table.broken),
        "difference": (table.fixed - table.broken) / table.n,
        "interval": list(interval) if interval is not None else None,
    }


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """``summary`` (``replay_summary``) as the lines ``replay_turns`` prints:
    the counts, the divergence table (step, turns, share) and the paired test."""
    n = summary["turns"]
    lines = [f"turns replayed: {n}"]
    if not n:
        return lines
    low, high = summary["identical_interval"]
    lines.append(
        f"identical: {summary['identical']} ({summary['identical_share']:.1%}, 95% CI {low:.1%}–{high:.1%}); "
        f"new answer: {summary['new_answer']}; diverged: {summary['diverged']}"
    )
    lines.append("divergence step | turns | share of turns")
    for step, count in summary["divergence_steps"].items():
        lines.append(f"{step:>15} | {count:>5} | {count / n:.1%}")
    lines.append(f"{'none':>15} | {n - summary['diverged']:>5} | {(n - summary['diverged']) / n:.1%}")
    paired = summary.get("paired")
    if paired:
        interval = paired["interval"]
        ci = f", 95% CI {interval[0]:+.1%} to {interval[1]:+.1%}" if interval else ""
        lines.append(
            f"scored both times: {paired['n']}; correct {paired['original_correct']} → "
            f"{paired['new_correct']} (fixed {paired['fixed']}, broken {paired['broken']}; "
            f"exact McNemar p = {paired['p_value']:.3g}; difference {paired['difference']:+.1%}{ci})"
        )
    return lines
