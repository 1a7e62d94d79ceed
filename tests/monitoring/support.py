"""Rows for the online-evaluation tests: finished chat turns and evaluators,
written through the models (the driver's own path is exercised in
``test_off_path.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from monitoring.models import OnlineEvaluator, OnlineScore
from monitoring.sync import evaluator_save
from turns.models import EventType, Turn, TurnEvent


def finished_turn(
    owner: Any, *, outcome: str = "answered", finished_at: datetime | None = None, **fields: Any
) -> Turn:
    """A finished chat turn: answered (succeeded), asked (succeeded) or failed."""
    status = {"answered": "succeeded", "asked": "succeeded", "failed": "failed", "cancelled": "cancelled"}[
        outcome
    ]
    values: dict[str, Any] = {
        "kind": "chat",
        "question": "What is 6*7?",
        "answer": "42" if outcome == "answered" else "",
        "steps": 2,
        "timings": {"total_ms": 1200},
        **fields,
    }
    return Turn.objects.create(
        owner=owner,
        status=status,
        outcome=outcome,
        finished_at=finished_at or timezone.now(),
        **values,
    )


def add_event(turn: Turn, type_: str, data: dict[str, Any]) -> None:
    seq = turn.last_seq + 1
    TurnEvent.objects.create(turn=turn, seq=seq, type=type_, data=data)
    Turn.objects.filter(pk=turn.pk).update(last_seq=seq)
    turn.last_seq = seq


def tool_call(turn: Turn, name: str) -> None:
    add_event(
        turn,
        EventType.TOOL_CALL,
        {"id": "c1", "name": name, "arguments": {}, "raw_arguments": None, "error": None},
    )


def evaluator(name: str = "quality", **fields: Any) -> OnlineEvaluator:
    return evaluator_save(evaluator=OnlineEvaluator(name=name, **{"sampling_rate": 1.0, **fields}))


def score_at(ev: OnlineEvaluator, owner: Any, when: datetime, passed: bool) -> OnlineScore:
    """A scored turn that ended at ``when`` (trend and alert tests)."""
    turn = finished_turn(owner, outcome="answered" if passed else "failed", finished_at=when)
    return OnlineScore.objects.create(
        turn=turn,
        evaluator=ev,
        value=1.0 if passed else 0.0,
        passed=passed,
        label=turn.outcome,
        turn_finished_at=when,
    )
