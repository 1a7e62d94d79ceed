"""Claiming a queued turn for one driver (docs/architecture.md#the-driver;
CONTRIBUTING.md#conditional-claims).

``turn_claim`` is what the driver calls; ``event_append_claim`` is the one
statement behind it: a conditional ``UPDATE … WHERE status = 'queued'`` that
both takes the turn and reserves the seqs of its first events, so a duplicate
job delivery does nothing and writes nothing. (healthchecks ``sendalerts``.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from common.db import column_of, concrete_field, pk_column
from common.sql import execute, turn_claim_sql
from turns.event_types import PhaseData, TurnStartedData
from turns.events import NewEvent, events_check, events_insert_reserved
from turns.models import EventType, Turn, TurnEvent, TurnPhase, TurnStatus


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn as its claim left it: the columns a driver starts from.
    ``fresh`` means it never ran before (no recorded step to rebuild)."""

    id: int
    question: str
    context: dict[str, Any]
    meta: dict[str, Any]
    timings: dict[str, Any]
    attempts: int
    max_steps: int
    job_id: str
    last_seq: int
    fresh: bool
    #: ``None``: ``AGENTLAB_MAX_OUTPUT_TOKENS``
    max_output_tokens: int | None = None
    #: ``Turn.agent_options``: ``system_prompt``, ``temperature`` when set
    agent_options: dict[str, Any] = field(default_factory=dict)
    #: for its trace and metrics (``agentlab.telemetry``): its conversation and
    #: when it was created (a datetime, or text on SQLite)
    conversation_id: int | None = None
    created_at: Any = None


_CLAIM_COLUMNS = (
    "question",
    "context",
    "meta",
    "timings",
    "attempts",
    "max_steps",
    "job_id",
    "last_seq",
    "max_output_tokens",
    "agent_options",
    "conversation",
    "created_at",
)


def event_append_claim(
    *, turn_id: int, job_id: str, count: int, events: Callable[[ClaimedTurn], Sequence[NewEvent]]
) -> tuple[ClaimedTurn, list[TurnEvent]] | None:
    """Claim a queued turn and append its first ``count`` events, in the
    caller's transaction.

    One ``UPDATE … WHERE status = 'queued' … RETURNING`` sets the turn
    running under claim token ``job_id`` (``heartbeat_at``, ``phase = act``,
    ``started_at`` if unset, ``attempts`` at least 1) and reserves ``count``
    seqs; one ``INSERT`` then writes ``events(turn)``, built from the claimed
    row (e.g. with its attempt number). A conditional update is the claim, as
    in healthchecks' ``sendalerts``; making it the statement that reserves the
    seqs, and returning only the columns a driver needs, saves reading the row
    back and a second update.

    Returns ``(turn as claimed, its new events)``, or ``None`` when the turn
    is not queued (a duplicate delivery, already taken, gone) — nothing is
    written then. Raises ``ValueError`` when ``events(turn)`` does not give
    ``count`` events of known types (roll the transaction back).
    """
    if count < 1:
        raise ValueError("a claim appends at least one event")
    now = timezone.now()
    connection = connections[Turn.objects.db]

    def prep(name: str, value: Any) -> Any:
        return concrete_field(Turn, name).get_db_prep_save(value, connection)

    text = turn_claim_sql(
        connection,
        table=Turn._meta.db_table,
        pk=pk_column(Turn),
        returning=tuple(column_of(Turn, name) for name in _CLAIM_COLUMNS),
    )
    params = [
        TurnStatus.RUNNING,
        prep("heartbeat_at", now),
        job_id,
        prep("updated_at", now),
        TurnPhase.ACT,
        prep("started_at", now),
        count,
        turn_id,
        TurnStatus.QUEUED,
    ]
    claimed, _ = execute(connection, text, params)
    row = claimed[0] if claimed else None
    if row is None:
        return None
    values = dict(zip((*_CLAIM_COLUMNS, "fresh"), row, strict=True))
    max_output = values["max_output_tokens"]
    turn = ClaimedTurn(
        id=turn_id,
        question=values["question"],
        context=_json_value(values["context"]),
        meta=_json_value(values["meta"]),
        timings=_json_value(values["timings"]),
        attempts=int(values["attempts"]),
        max_steps=int(values["max_steps"]),
        job_id=values["job_id"],
        last_seq=int(values["last_seq"]),
        fresh=bool(values["fresh"]),
        max_output_tokens=int(max_output) if max_output is not None else None,
        agent_options=_json_value(values["agent_options"]),
        conversation_id=values["conversation"],
        created_at=values["created_at"],
    )
    new = list(events(turn))
    events_check(new)
    if len(new) != count:
        raise ValueError(f"the claim reserved {count} seqs but {len(new)} events were given")
    rows = events_insert_reserved(turn_id=turn_id, after=turn.last_seq - count, events=new, now=now)
    return turn, rows


def _json_value(raw: Any) -> dict[str, Any]:
    """A JSON column read by a plain cursor: text on SQLite, and on
    PostgreSQL too (Django loads jsonb as text and decodes it in the field)."""
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return dict(value or {})


def turn_claim(*, turn_id: int, job_id: str = "") -> ClaimedTurn | None:
    """Claim a queued turn for this job: ``queued → running`` by a conditional
    update, with its ``turn.started`` and ``phase: act`` events
    (``event_append_claim``). Returns the turn as claimed — ``fresh`` when it
    never ran before, so there is no recorded step to rebuild — or ``None``
    when someone else has it (or it is no longer queued); then nothing is
    written. (healthchecks ``sendalerts``.)

    The claim stores a token unique to this claim in ``turn.job_id`` (the job
    id plus a random suffix); every later write of this driver is conditional
    on it (``event_append_many(holder=…)``).
    """
    job_id = f"{job_id[:40] or 'inline'}:{uuid.uuid4().hex[:16]}"
    with transaction.atomic():
        claimed = event_append_claim(
            turn_id=turn_id,
            job_id=job_id,
            count=2,
            events=lambda turn: [
                NewEvent(EventType.TURN_STARTED, TurnStartedData(attempt=turn.attempts, job_id=job_id)),
                NewEvent(EventType.PHASE, PhaseData(phase=TurnPhase.ACT)),
            ],
        )
    return None if claimed is None else claimed[0]
