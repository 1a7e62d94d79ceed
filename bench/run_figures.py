"""What an evaluation run's stored rows say the agent did: a closing-note table.

Reads one run's predictions and the event logs of their turns and prints, as a
Markdown table and (``--json``) as JSON:

- the share of turns with at least one call of a working tool (any tool but
  ``final_answer`` / ``ask_user``), and with any tool call at all;
- mean steps (LLM calls of the agent loop per prediction, as stored);
- review verdict counts (the last review of each prediction);
- stop reasons; accuracy (correct ÷ scored); p50 latency (ms);
- how many agent steps were decoded in which mode (``decoding`` of the
  ``llm.usage`` events; ``unrecorded`` for logs written before it existed),
  and how they ended (``finish_reason``: ``length`` is cut by the token limit).

    python bench/run_figures.py RUN_ID [RUN_ID …] [--json FILE]

Runs with the settings of the environment (``DATABASE_URL`` unset: the SQLite
file under ``var/``), like ``manage.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENDING_TOOLS = frozenset({"final_answer", "ask_user"})


def figures(run_id: str) -> dict[str, Any]:
    """The figures of run ``run_id`` (see the module docstring)."""
    from evaluation.models import Prediction
    from turns.models import EventType, TurnEvent

    predictions = list(Prediction.objects.filter(run__run_id=run_id).order_by("example__position"))
    if not predictions:
        raise SystemExit(f"run {run_id!r} has no predictions")
    turn_ids = [p.turn_id for p in predictions if p.turn_id is not None]
    calls_by_turn: dict[int, list[str]] = {t: [] for t in turn_ids}
    decoding: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    for turn_id, type_, data in TurnEvent.objects.filter(
        turn_id__in=turn_ids, type__in=[EventType.TOOL_CALL, EventType.LLM_USAGE]
    ).values_list("turn_id", "type", "data"):
        if type_ == EventType.TOOL_CALL:
            calls_by_turn[turn_id].append(str((data.get("call") or {}).get("name") or ""))
        elif data.get("role", "agent") == "agent":
            decoding[str(data.get("decoding") or "unrecorded")] += 1
            finish[str(data.get("finish_reason") or "unknown")] += 1
    n = len(predictions)
    working = sum(1 for calls in calls_by_turn.values() if any(c not in ENDING_TOOLS for c in calls))
    any_call = sum(1 for calls in calls_by_turn.values() if calls)
    scored = [p for p in predictions if p.correct is not None]
    latencies = [p.latency_ms for p in predictions if p.latency_ms is not None]
    tools_used: Counter[str] = Counter(c for calls in calls_by_turn.values() for c in calls)
    return {
        "run_id": run_id,
        "predictions": n,
        "share_with_working_tool_call": round(working / n, 3),
        "share_with_any_tool_call": round(any_call / n, 3),
        "mean_steps": round(sum(p.steps for p in predictions) / n, 2),
        "review_verdicts": dict(Counter(p.review_verdict or "(none)" for p in predictions).most_common()),
        "stop_reasons": dict(Counter(p.stop_reason for p in predictions).most_common()),
        "accuracy": round(sum(1 for p in scored if p.correct) / len(scored), 3) if scored else None,
        "correct": sum(1 for p in scored if p.correct),
        "scored": len(scored),
        "p50_latency_ms": int(statistics.median(latencies)) if latencies else None,
        "tool_calls": dict(tools_used.most_common()),
        "step_decoding": dict(decoding.most_common()),
        "step_finish_reasons": dict(finish.most_common()),
    }


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "—"
    return "—" if value is None else str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: one column per run."""
    keys = [k for k in rows[0] if k != "run_id"]
    lines = ["| | " + " | ".join(r["run_id"] for r in rows) + " |", "|---" * (len(rows) + 1) + "|"]
    lines += ["| " + k + " | " + " | ".join(_cell(r[k]) for r in rows) + " |" for k in keys]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_ids", nargs="+")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    rows = [figures(run_id) for run_id in args.run_ids]
    print(table(rows))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
