"""The per-turn event log: the one place that appends events (docs/architecture.md#the-event-log).

``event_append_many`` locks the turn row, stamps each event with the next seq
(``last_seq + 1``, ``+ 2`` …), inserts them, updates the turn, and after the
commit rings the channel-layer group of that turn. The unique constraint on
(turn, seq) backs the lock up. (healthchecks ``Check.ping``; Zulip
``send_event_on_commit``.)

The channel layer is only a doorbell (``turns.doorbell``): a lost ring delays
nothing a subscriber cannot recover from the database on its next heartbeat
tick. Payloads are checked against ``turns.event_types`` and made JSON-safe.
The other appender is the claim (``turns.driver.lease``), which takes a turn
and reserves its first seqs in one statement; reads are in ``turns.selectors``.

``event_append_batch`` is what the group-commit writer (``turns.driver.writer``)
runs: many callers' appends — each ``event_append_many``'s arguments and a
hook — in one transaction, the turns locked in id order, every event in one
multi-row ``INSERT``, the turns and the hooks' row updates one statement per
set of columns (docs/architecture.md#the-group-commit-writer).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from agentlab.agent.text import json_safe, safe_fields
from agentlab.telemetry import events_appended
from common.db import column_of, column_values, concrete_field, pk_column, rows_update, updates_deferred
from common.errors import StateConflict
from common.sql import events_insert_sql, execute, seq_advance_each_sql, seq_advance_sql, turns_lock_sql
from turns.doorbell import ring_turn
from turns.event_types import payload_check
from turns.models import Turn, TurnEvent, TurnStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewEvent:
    """An event to append: ``type`` from ``EventType``, ``data`` a JSON-able mapping."""

    type: str
    data: Mapping[str, Any]


class TurnNotHeld(StateConflict):
    """The appender's claim on the turn is gone: the turn was marked
    interrupted (or finished, or claimed again by another job) meanwhile.
    Nothing was written."""


def event_append(
    *,
    turn_id: int,
    type: str,
    data: Mapping[str, Any] | None = None,
    turn_fields: Mapping[str, Any] | None = None,
    holder: str | None = None,
) -> TurnEvent:
    """Append one event to a turn's log; see ``event_append_many``."""
    return event_append_many(
        turn_id=turn_id, events=[NewEvent(type, data or {})], turn_fields=turn_fields, holder=holder
    )[-1]


def event_append_many(
    *,
    turn_id: int,
    events: Sequence[NewEvent],
    turn_fields: Mapping[str, Any] | None = None,
    holder: str | None = None,
) -> list[TurnEvent]:
    """Append events to a turn's log in one transaction and ring its doorbell.

    The turn row is locked and its ``last_seq`` advanced in one statement
    (``_advance_seq``), so concurrent appenders get consecutive seqs with no
    gap. ``turn_fields`` are written to
    the turn in the same transaction (status, answer …), so the log and the
    turn row never disagree. Payloads pass through ``json_safe``.

    ``holder`` is a driver's claim token (``Turn.job_id`` as set by the
    claim): the append then happens only while the turn is still running or
    waiting under that claim, so a driver that was presumed dead (its turn
    swept to interrupted, maybe resumed by another job) cannot write into the
    log any more — it gets ``TurnNotHeld``.

    Returns the new events with their seqs. Raises ``ValueError`` for an
    unknown event type or a payload missing a required key (``events_check``),
    ``Turn.DoesNotExist`` for an unknown turn and ``TurnNotHeld`` (see
    above); nothing is written then.
    """
    events_check(events)
    now = timezone.now()
    fields = safe_fields(turn_fields)
    # savepoint=False: inside a caller's transaction (claim, finish) a failure
    # here must roll the whole of it back anyway, and a savepoint costs two
    # more round trips on the hottest path.
    with transaction.atomic(savepoint=False):
        last_seq = _advance_seq(turn_id=turn_id, count=len(events), now=now, fields=fields, holder=holder)
        return events_insert_reserved(turn_id=turn_id, after=last_seq, events=events, now=now)


def event_append_each(*, turn_ids: Sequence[int], event: NewEvent) -> list[TurnEvent]:
    """Append the same ``event`` to each of several turns, in the caller's
    transaction: one ``UPDATE … WHERE id IN (…) RETURNING`` advances every
    ``last_seq`` by one, one ``INSERT`` writes the events — two statements
    for any number of turns (``run_plan`` queues a run's examples this way).
    Returns the events in ``turn_ids`` order. Raises ``ValueError`` for an
    unknown event type or a repeated id, ``Turn.DoesNotExist`` when a turn is
    missing (roll the transaction back)."""
    events_check([event])
    if len(set(turn_ids)) != len(turn_ids):
        raise ValueError("event_append_each needs distinct turn ids")
    if not turn_ids:
        return []
    now = timezone.now()
    connection = connections[Turn.objects.db]
    text = seq_advance_each_sql(
        connection, table=Turn._meta.db_table, pk=pk_column(Turn), count=len(turn_ids)
    )
    with transaction.atomic(savepoint=False):
        updated = concrete_field(Turn, "updated_at").get_db_prep_save(now, connection)
        rows, _ = execute(connection, text, [updated, *turn_ids])
        seqs = dict(rows)
        missing = [t for t in turn_ids if t not in seqs]
        if missing:
            raise Turn.DoesNotExist(f"turns {missing[:5]} do not exist")
        data = json_safe(dict(event.data))
        return _insert_rows(
            [TurnEvent(turn_id=t, seq=seqs[t], type=event.type, data=data, created_at=now) for t in turn_ids],
            now=now,
        )


def events_check(events: Sequence[NewEvent]) -> None:
    """Refuse (``ValueError``) an empty append, an unknown event type, or a
    payload without its type's required keys (``turns.event_types``)."""
    if not events:
        raise ValueError("an append needs at least one event")
    for event in events:
        payload_check(event.type, event.data)


def events_insert_reserved(
    *, turn_id: int, after: int, events: Sequence[NewEvent], now: datetime
) -> list[TurnEvent]:
    """Insert ``events`` as seqs ``after + 1 …`` of one turn, whose
    ``last_seq`` the caller has already advanced in its transaction (the
    claim does, ``turns.driver.lease``); see ``_insert_rows``. Nothing but
    an appender of this module and the claim calls this."""
    return _insert_rows(events_reserved_rows(turn_id=turn_id, after=after, events=events, now=now), now=now)


def events_reserved_rows(
    *, turn_id: int, after: int, events: Sequence[NewEvent], now: datetime
) -> list[TurnEvent]:
    """``events`` as unsaved rows, seqs ``after + 1 …`` of one turn, payloads
    JSON-safe: what ``events_insert_reserved`` inserts, or a claim in a
    batch hands ``event_append_batch`` (``reserved``)."""
    return [
        TurnEvent(turn_id=turn_id, seq=after + i, type=e.type, data=json_safe(dict(e.data)), created_at=now)
        for i, e in enumerate(events, start=1)
    ]


def _insert_rows(rows: list[TurnEvent], *, now: datetime) -> list[TurnEvent]:
    """Insert unsaved event rows (seqs already reserved by advancing their
    turns' ``last_seq``) in one multi-row ``INSERT … RETURNING`` inside the
    caller's transaction, set their ids, and ring each turn's doorbell once
    it commits.

    One prepared statement instead of ``bulk_create``: the ORM's insert
    compiler was a measurable share of ``run_eval``'s CPU. Values go through
    the model fields' ``get_db_prep_save``, as the ORM's would.
    """
    connection = connections[TurnEvent.objects.db]
    data_field, created_field = concrete_field(TurnEvent, "data"), concrete_field(TurnEvent, "created_at")
    created = created_field.get_db_prep_save(now, connection)
    params: list[Any] = []
    for row in rows:
        params += [row.turn_id, row.seq, row.type, data_field.get_db_prep_save(row.data, connection), created]
    text = events_insert_sql(
        connection,
        table=TurnEvent._meta.db_table,
        columns=tuple(column_of(TurnEvent, name) for name in ("turn", "seq", "type", "data", "created_at")),
        returning=(pk_column(TurnEvent), column_of(TurnEvent, "turn"), column_of(TurnEvent, "seq")),
        rows=len(rows),
    )
    inserted, _ = execute(connection, text, params)
    ids = {(turn_id, seq): pk for pk, turn_id, seq in inserted}
    frames: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        row.pk = ids[(row.turn_id, row.seq)]
        row._state.adding = False
        row._state.db = connection.alias
        frames.setdefault(row.turn_id, []).append(row.as_frame())
    # Ring only once the events are visible to readers: a subscriber woken
    # before the commit would read nothing and wait for the next tick.
    for turn_id, turn_frames in frames.items():
        transaction.on_commit(functools.partial(ring_turn, turn_id, turn_frames))
    events_appended(len(rows))  # a metric (agentlab.telemetry)
    return rows


def _advance_seq(
    *, turn_id: int, count: int, now: datetime, fields: Mapping[str, Any], holder: str | None
) -> int:
    """Lock the turn row, add ``count`` to its ``last_seq`` and write
    ``fields``, in one ``UPDATE … RETURNING`` statement; return the seq the
    new events start after.

    One statement instead of ``SELECT … FOR UPDATE`` then ``UPDATE``: the
    UPDATE takes the row lock itself (PostgreSQL), or runs under the database
    write lock that the IMMEDIATE transaction holds (SQLite ≥ 3.35), so two
    appenders can never read the same ``last_seq``. Field values go through
    each model field's own ``get_db_prep_save``, as the ORM would. Raises
    ``Turn.DoesNotExist`` for an unknown turn.
    """
    connection = connections[Turn.objects.db]
    meta = Turn._meta
    for name in fields:
        if meta.get_field(name).name in ("last_seq", "updated_at", "id"):
            raise ValueError(f"turn field {name!r} is managed by the event log")
    columns, prepared = column_values(Turn, {"updated_at": now, **fields}, connection)
    params: list[Any] = [count, *prepared, turn_id]
    if holder is not None:
        params.extend([holder, TurnStatus.RUNNING, TurnStatus.WAITING])
    text = seq_advance_sql(
        connection, table=meta.db_table, pk=pk_column(Turn), columns=columns, held=holder is not None
    )
    rows, _ = execute(connection, text, params)
    row = rows[0] if rows else None
    if row is None:
        if holder is not None and Turn.objects.filter(pk=turn_id).exists():
            raise TurnNotHeld(f"turn {turn_id} is no longer held by {holder}")
        raise Turn.DoesNotExist(f"turn {turn_id} does not exist")
    return int(row[0]) - count


@dataclass
class AppendRequest:
    """One caller's part of a batch: ``event_append_many``'s arguments, and
    ``then``, called in the same transaction once the turn row has its new
    fields (a terminal event's ``TurnPolicy.on_finish``)."""

    turn_id: int
    events: Sequence[NewEvent]
    turn_fields: Mapping[str, Any] | None = None
    holder: str | None = None
    then: Callable[[], None] | None = None
    #: the JSON-safe payloads and turn fields, made before the transaction
    prepared: tuple[list[dict[str, Any]], dict[str, Any]] | None = field(default=None, repr=False)


#: An append's outcome in a batch: its events, or the error it alone raised.
Outcome = list[TurnEvent] | Exception

#: The most event rows in one ``INSERT`` (5 parameters each: far below the
#: databases' limits on parameters per statement).
INSERT_ROWS_MAX = 2000

_ACTIVE = (TurnStatus.RUNNING, TurnStatus.WAITING)


def event_append_prepare(request: AppendRequest) -> None:
    """Check ``request`` (``events_check``, the turn fields the log manages)
    and make its payloads and fields JSON-safe, outside any transaction.
    Raises ``ValueError`` as ``event_append_many`` would."""
    events_check(request.events)
    fields = safe_fields(request.turn_fields)
    for name in fields:
        if Turn._meta.get_field(name).name in ("last_seq", "updated_at", "id"):
            raise ValueError(f"turn field {name!r} is managed by the event log")
    request.prepared = ([json_safe(dict(e.data)) for e in request.events], dict(fields))


def event_append_batch(
    requests: Sequence[AppendRequest], *, reserved: Sequence[TurnEvent] = (), now: datetime | None = None
) -> list[Outcome]:
    """Append every request's events in one transaction (the caller's, or
    one of its own) and return each request's outcome, in order.
    ``reserved``: event rows whose seqs the caller has already taken in this
    transaction (the batch's claims, ``turns.driver.writer``), inserted with the
    rest; ``now``: their time.

    The requests' turns are locked in id order (``turns_lock_sql``: no
    deadlock between two batches); each request is then checked as
    ``event_append_many`` checks it — ``ValueError`` for a bad payload,
    ``Turn.DoesNotExist``, ``TurnNotHeld`` — and a refused one is that
    request's outcome alone, nothing of it written, while the others go on.
    Requests of one turn take consecutive seqs in their order (a finish
    that ends the turn refuses a later request held by the same claim).
    All events go in one multi-row ``INSERT``; each turn gets its new
    ``last_seq``, ``updated_at`` and fields in one ``UPDATE … FROM
    (VALUES …)`` per set of columns; then each accepted request's ``then``
    runs, its ``update_by_pk`` calls deferred into one statement per model
    and columns (``common.db.updates_deferred``). Any exception other than
    those per-request refusals — a database error, a ``then`` that raised —
    propagates: the caller rolls the batch back and retries it request by
    request (``turns.driver.writer``). Doorbells ring after the commit, once per
    turn (``_insert_rows``)."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    for i, request in enumerate(requests):
        if request.prepared is None:
            try:
                event_append_prepare(request)
            except ValueError as exc:
                outcomes[i] = exc
    now = now or timezone.now()
    with transaction.atomic(savepoint=False):
        states = _turns_lock(
            sorted({r.turn_id for r, o in zip(requests, outcomes, strict=True) if o is None})
        )
        rows, values = _seqs_assign(requests, outcomes, states, now=now)
        rows = [*reserved, *rows]
        for start in range(0, len(rows), INSERT_ROWS_MAX):
            _insert_rows(rows[start : start + INSERT_ROWS_MAX], now=now)
        _turns_update(values)
        with updates_deferred():
            for request, outcome in zip(requests, outcomes, strict=True):
                if request.then is not None and isinstance(outcome, list):
                    request.then()
    return [o if o is not None else RuntimeError("undecided") for o in outcomes]  # all decided above


def _turns_lock(ids: list[int]) -> dict[int, list[Any]]:
    """Lock turns ``ids`` (sorted) in id order; each found turn's ``[last_seq,
    job_id, status]``."""
    if not ids:
        return {}
    connection = connections[Turn.objects.db]
    text = turns_lock_sql(connection, table=Turn._meta.db_table, pk=pk_column(Turn), count=len(ids))
    found, _ = execute(connection, text, ids)
    return {int(pk): [int(last_seq), job_id, status] for pk, last_seq, job_id, status in found}


def _seqs_assign(
    requests: Sequence[AppendRequest],
    outcomes: list[Outcome | None],
    states: dict[int, list[Any]],
    *,
    now: datetime,
) -> tuple[list[TurnEvent], dict[int, dict[str, Any]]]:
    """Check each request still undecided against its turn's locked state and
    give its events their seqs: the event rows to insert, and each turn's new
    values (``last_seq``, ``updated_at``, the requests' fields in order).
    A refused request's outcome is set here; an accepted one's is its rows."""
    rows: list[TurnEvent] = []
    values: dict[int, dict[str, Any]] = {}
    for i, request in enumerate(requests):
        if outcomes[i] is not None:
            continue
        turn_id, state = request.turn_id, states.get(request.turn_id)
        if state is None:
            outcomes[i] = Turn.DoesNotExist(f"turn {turn_id} does not exist")
            continue
        if request.holder is not None and (state[1] != request.holder or state[2] not in _ACTIVE):
            outcomes[i] = TurnNotHeld(f"turn {turn_id} is no longer held by {request.holder}")
            continue
        assert request.prepared is not None
        payloads, fields = request.prepared
        mine = [
            TurnEvent(turn_id=turn_id, seq=state[0] + n, type=e.type, data=data, created_at=now)
            for n, (e, data) in enumerate(zip(request.events, payloads, strict=True), start=1)
        ]
        state[0] += len(mine)
        state[1], state[2] = fields.get("job_id", state[1]), fields.get("status", state[2])
        values.setdefault(turn_id, {}).update(fields, last_seq=state[0], updated_at=now)
        rows.extend(mine)
        outcomes[i] = mine
    return rows, values


def _turns_update(values: dict[int, dict[str, Any]]) -> None:
    """Write each turn's new values, one statement per set of columns."""
    groups: dict[tuple[str, ...], dict[int, dict[str, Any]]] = {}
    for turn_id, turn_values in values.items():
        names = tuple(sorted(turn_values))
        groups.setdefault(names, {})[turn_id] = {name: turn_values[name] for name in names}
    for rows in groups.values():
        if len(rows_update(Turn, rows)) != len(rows):
            raise Turn.DoesNotExist("a locked turn was not updated")
