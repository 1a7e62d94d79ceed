"""Which finished chat turns an online evaluator scores: the deterministic
sample and the filters (docs/monitoring.md#online-evaluators)."""

from __future__ import annotations

import hashlib

from django.db.models import Exists, OuterRef, QuerySet

from monitoring.models import OnlineEvaluator
from turns.models import EventType, Turn, TurnEvent, TurnKind, TurnStatus

#: The statuses of a finished turn (the ones with a terminal event).
FINISHED = (TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED)


def sample_point(*, evaluator_id: int, turn_id: int) -> float:
    """A number in [0, 1) fixed by (evaluator, turn): the first 8 bytes of
    SHA-256 of ``"<evaluator_id>:<turn_id>"`` over 2⁶⁴. Uniform across turns,
    independent across evaluators, and the same on every delivery of a task
    and in a backfill — so a redelivered task decides as the first did."""
    digest = hashlib.sha256(f"{evaluator_id}:{turn_id}".encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def sampled(*, evaluator_id: int, turn_id: int, rate: float) -> bool:
    """Whether the turn is in the evaluator's sample at ``rate`` (0: none, 1: all)."""
    return sample_point(evaluator_id=evaluator_id, turn_id=turn_id) < rate


def finished_chat_turns() -> QuerySet[Turn]:
    """Chat turns that ended with a terminal event (answered, asked, failed,
    cancelled) — the users' traffic: a side-by-side page's turns (staff trying
    variants, ``agent_options["variant"]`` set) are left out, as evaluation
    turns are, so a comparison of prompts never moves the production trend."""
    return Turn.objects.filter(kind=TurnKind.CHAT, status__in=FINISHED, finished_at__isnull=False).exclude(
        agent_options__has_key="variant"
    )


def turns_matching(evaluator: OnlineEvaluator, turns: QuerySet[Turn]) -> QuerySet[Turn]:
    """``turns`` narrowed by the evaluator's filters: the owner in
    ``owner_group``, a ``tool.call`` event of ``tool``, the ``outcome``
    (each only when set). One query, whatever the number of turns."""
    if evaluator.owner_group_id is not None:
        turns = turns.filter(owner__groups=evaluator.owner_group_id)
    if evaluator.tool:
        called = TurnEvent.objects.filter(
            turn_id=OuterRef("pk"), type=EventType.TOOL_CALL, data__name=evaluator.tool
        )
        turns = turns.filter(Exists(called))
    if evaluator.outcome:
        turns = turns.filter(outcome=evaluator.outcome)
    return turns


def turn_matches(evaluator: OnlineEvaluator, turn_id: int) -> bool:
    """Whether finished chat turn ``turn_id`` passes the evaluator's filters."""
    return turns_matching(evaluator, finished_chat_turns().filter(pk=turn_id)).exists()
