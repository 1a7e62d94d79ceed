"""The agent's path — the tool calls of a turn's answering attempt, with
their arguments and results — read from the turn's event log.

This is the ONE place evaluation reads a path from the log (issue 48): every
trajectory scorer, the trajectory judge and the comparison's trajectory view
take :class:`~evaluation.scoring.trajectory_spec.TrajectoryStep` lists from
here. When an attempt becomes a type of its own (issue 40: its steps are the
trajectory), only this module changes.

Which calls: the ``tool.call`` events of the turn's last attempt (the one
whose answer was scored), in ``seq`` order, each with the output of its
``tool.result`` (matched by the call's id; ``None`` when it has none, for
example a call cut off by a crash) and whether that result was an error. An attempt begun by ``turn_continue``
(``attempt.retry`` with ``reason: "continue"``) continues the previous one's
steps, so the previous attempt's calls come first. ``final_answer`` and
``ask_user`` stay in; the scorers leave them out unless an example lists
them (``evaluation.scoring.trajectory_match.agent_path``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from evaluation.scoring.trajectory_spec import TrajectoryStep
from turns.models import EventType, TurnEvent

_TYPES = (EventType.TOOL_CALL, EventType.TOOL_RESULT, EventType.ATTEMPT_RETRY)


def agent_trajectories(turn_ids: Iterable[int]) -> dict[int, list[TrajectoryStep]]:
    """``{turn id: its path}`` for every turn of ``turn_ids`` (a turn with no
    tool call maps to ``[]``). One query over the turns' ``tool.call``,
    ``tool.result`` and ``attempt.retry`` events."""
    ids = sorted(set(turn_ids))
    by_turn: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    rows = (
        TurnEvent.objects.filter(turn_id__in=ids, type__in=_TYPES)
        .order_by("turn_id", "seq")
        .values_list("turn_id", "type", "data")
    )
    for turn_id, kind, data in rows.iterator(chunk_size=2000):
        by_turn[turn_id].append((kind, data or {}))
    return {turn_id: _path(by_turn.get(turn_id, [])) for turn_id in ids}


def agent_trajectory(turn_id: int) -> list[TrajectoryStep]:
    """One turn's path (:func:`agent_trajectories`)."""
    return agent_trajectories([turn_id])[turn_id]


def _attempts_of_path(events: list[tuple[str, dict[str, Any]]]) -> set[int]:
    """The attempts whose calls make the path: the last one, and the ones it continues."""
    attempts = [int(d.get("attempt") or 1) for kind, d in events if kind == EventType.TOOL_CALL]
    continued = {
        int(d.get("attempt") or 0)
        for kind, d in events
        if kind == EventType.ATTEMPT_RETRY and d.get("reason") == "continue"
    }
    retried = [int(d.get("attempt") or 0) for kind, d in events if kind == EventType.ATTEMPT_RETRY]
    last = max([*attempts, *retried], default=1)
    chain = {last}
    while last in continued and last > 1:
        last -= 1
        chain.add(last)
    return chain


def _path(events: list[tuple[str, dict[str, Any]]]) -> list[TrajectoryStep]:
    chain = _attempts_of_path(events)
    results: dict[tuple[int, str], tuple[str, bool]] = {}
    for kind, data in events:
        if kind == EventType.TOOL_RESULT and isinstance(data.get("result"), dict):
            call_id = str(data["result"].get("call_id") or "")
            output = str(data["result"].get("output") or "")
            results[(int(data.get("attempt") or 1), call_id)] = (output, bool(data["result"].get("is_error")))
    path = []
    for kind, data in events:
        if kind != EventType.TOOL_CALL or int(data.get("attempt") or 1) not in chain:
            continue
        call = data.get("call") or {}
        arguments = call.get("arguments")
        attempt = int(data.get("attempt") or 1)
        result = results.get((attempt, str(call.get("id") or "")))
        path.append(
            TrajectoryStep(
                tool=str(call.get("name") or ""),
                args=dict(arguments) if isinstance(arguments, dict) else {},
                result=result[0] if result is not None else None,
                step=data.get("step"),
                is_error=result is not None and result[1],
            )
        )
    return path
