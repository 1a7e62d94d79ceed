"""A run's figures on its conversation examples (docs/evaluating.md#conversation-examples),
beside the accuracy — which counts each conversation once, by its verdict
(every scored turn right; a simulated user's goal reached).

``conversation_metrics`` reads the predictions' ``conversation_result``
(``evaluation.run.conversation_score``); ``conversation_table`` prints them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

from evaluation.metrics.intervals import accuracy_text, wilson_interval


def _rate(correct: int, n: int) -> dict[str, Any]:
    interval = wilson_interval(correct, n)
    return {
        "correct": correct,
        "n": n,
        "accuracy": correct / n if n else None,
        "accuracy_ci": list(interval) if interval is not None else None,
    }


def conversation_metrics(rows: Iterable[tuple[bool | None, Mapping[str, Any]]]) -> dict[str, Any] | None:
    """The conversation figures of ``(correct, conversation_result)`` rows
    (a one-question example's result is ``{}`` and is left out); ``None``
    when the run has no conversation example.

    ``examples``: conversations; ``scored_turns`` / ``correct_turns`` and
    ``turn_accuracy`` (with its Wilson interval, ``turn_accuracy_ci``): the
    scripted turns with a gold answer; ``last_turn_accuracy``: each scripted
    conversation's last scored turn; ``goal``: the simulated users' success
    (``correct`` of ``n``, the rate and its interval), ``mean_turns`` and
    ``mean_turns_to_goal`` (over the conversations that reached it);
    ``ended``: how many ended each way (``script_done``, ``stop_marker``,
    ``max_turns``, ``turn_failed``, ``simulator_failed``)."""
    found = [(correct, result) for correct, result in rows if result]
    if not found:
        return None
    scripted = [result for _, result in found if result.get("kind") == "turns"]
    simulated = [(correct, result) for correct, result in found if result.get("kind") == "simulated"]
    scored = sum(int(r.get("scored_turns") or 0) for r in scripted)
    right = sum(int(r.get("correct_turns") or 0) for r in scripted)
    last = [r["last_turn_correct"] for r in scripted if r.get("last_turn_correct") is not None]
    turn = _rate(right, scored)
    metrics: dict[str, Any] = {
        "examples": len(found),
        "scored_turns": scored,
        "correct_turns": right,
        "turn_accuracy": turn["accuracy"],
        "turn_accuracy_ci": turn["accuracy_ci"],
        "last_turn_accuracy": sum(1 for v in last if v) / len(last) if last else None,
        "ended": dict(Counter(str(result.get("ended") or "") for _, result in found)),
    }
    if simulated:
        judged = [(c, r) for c, r in simulated if c is not None]
        reached = [r for c, r in judged if c]
        to_goal = [int(r.get("turns_to_goal") or len(r.get("turns") or [])) for r in reached]
        metrics["goal"] = {
            **_rate(len(reached), len(judged)),
            "mean_turns": sum(len(r.get("turns") or []) for _, r in simulated) / len(simulated),
            "mean_turns_to_goal": sum(to_goal) / len(to_goal) if to_goal else None,
        }
    return metrics


def conversation_table(block: Mapping[str, Any]) -> Table | None:
    """The "Conversations" table of ``metrics["conversations"]``; ``None`` without one."""
    if not block:
        return None
    from rich.table import Table  # the console's: never loaded by the admin or the API at start-up

    table = Table(title="Conversations")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("conversations", str(block["examples"]))
    if block.get("scored_turns"):
        table.add_row("per-turn accuracy", accuracy_text(block["correct_turns"], block["scored_turns"]))
        last = block.get("last_turn_accuracy")
        table.add_row("last-turn accuracy", "—" if last is None else f"{last * 100:.1f}%")
    goal = block.get("goal")
    if goal:
        table.add_row("goal success", accuracy_text(goal["correct"], goal["n"]))
        table.add_row("mean turns", f"{goal['mean_turns']:.2f}")
        to_goal = goal.get("mean_turns_to_goal")
        table.add_row("mean turns to goal", "—" if to_goal is None else f"{to_goal:.2f}")
    for reason, count in sorted((block.get("ended") or {}).items()):
        table.add_row(f"ended: {reason}", str(count))
    return table
