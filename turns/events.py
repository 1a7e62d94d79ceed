"""The per-turn event log: the one place that appends events (DESIGN.md §5).

``event_append_many`` locks the turn row, stamps each event with the next seq
(``last_seq + 1``, ``+ 2`` …), inserts them, updates the turn, and after the
commit rings the channel-layer group of that turn. The unique constraint on
(turn, seq) backs the lock up. (healthchecks ``Check.ping``; Zulip
``send_event_on_commit``.)

The channel layer is only a doorbell: a lost ring delays nothing a subscriber
cannot recover from the database on its next heartbeat tick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from common.db import column_assignments
from common.errors import StateConflict

from .models import EventType, Turn, TurnEvent, TurnPhase, TurnStatus

logger = logging.getLogger(__name__)

#: Lone UTF-16 surrogates cannot be encoded as UTF-8 (so neither database can
#: store them) and NUL cannot be stored in PostgreSQL text or jsonb.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_EVENT_TYPES = frozenset(EventType.values)


def clean_text(text: str) -> str:
    """Replace characters no database here can store (NUL, lone surrogates) by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def json_safe(value: Any) -> Any:
    """Return ``value`` as plain JSON data that both databases can store.

    Strings lose NUL and lone surrogates (see ``clean_text``), dict keys become
    strings, tuples and sets become lists, NaN/±inf become ``None``, objects
    with ``to_dict()`` are converted, and anything else becomes ``str(value)``.
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return json_safe(to_dict())
    return clean_text(str(value))


def turn_group(turn_id: int) -> str:
    """The channel-layer group a turn's doorbell rings in."""
    return f"turn.{turn_id}"


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
    unknown event type, ``Turn.DoesNotExist`` for an unknown turn and
    ``TurnNotHeld`` (see above); nothing is written then.
    """
    _check_types(events)
    now = timezone.now()
    fields = {k: clean_text(v) if isinstance(v, str) else v for k, v in (turn_fields or {}).items()}
    # savepoint=False: inside a caller's transaction (claim, finish) a failure
    # here must roll the whole of it back anyway, and a savepoint costs two
    # more round trips on the hottest path.
    with transaction.atomic(savepoint=False):
        last_seq = _advance_seq(turn_id=turn_id, count=len(events), now=now, fields=fields, holder=holder)
        return _insert_events(turn_id=turn_id, after=last_seq, events=events, now=now)


def event_append_each(*, turn_ids: Sequence[int], event: NewEvent) -> list[TurnEvent]:
    """Append the same ``event`` to each of several turns, in the caller's
    transaction: one ``UPDATE … WHERE id IN (…) RETURNING`` advances every
    ``last_seq`` by one, one ``INSERT`` writes the events — two statements
    for any number of turns (``run_plan`` queues a run's examples this way).
    Returns the events in ``turn_ids`` order. Raises ``ValueError`` for an
    unknown event type or a repeated id, ``Turn.DoesNotExist`` when a turn is
    missing (roll the transaction back)."""
    _check_types([event])
    if len(set(turn_ids)) != len(turn_ids):
        raise ValueError("event_append_each needs distinct turn ids")
    if not turn_ids:
        return []
    now = timezone.now()
    connection = connections[Turn.objects.db]
    meta = Turn._meta
    qn = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(turn_ids))
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {qn('last_seq')} = {qn('last_seq')} + 1, {qn('updated_at')} = %s "
        f"WHERE {qn(meta.pk.column)} IN ({marks}) RETURNING {qn(meta.pk.column)}, {qn('last_seq')}"
    )
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cursor:
            cursor.execute(sql, [meta.get_field("updated_at").get_db_prep_save(now, connection), *turn_ids])
            seqs = dict(cursor.fetchall())
        missing = [t for t in turn_ids if t not in seqs]
        if missing:
            raise Turn.DoesNotExist(f"turns {missing[:5]} do not exist")
        data = json_safe(dict(event.data))
        return _insert_rows(
            [TurnEvent(turn_id=t, seq=seqs[t], type=event.type, data=data, created_at=now) for t in turn_ids],
            now=now,
        )


def _check_types(events: Sequence[NewEvent]) -> None:
    if not events:
        raise ValueError("an append needs at least one event")
    for event in events:
        if event.type not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {event.type!r}; expected one of {sorted(_EVENT_TYPES)}")


def _insert_events(*, turn_id: int, after: int, events: Sequence[NewEvent], now: datetime) -> list[TurnEvent]:
    """Insert ``events`` as seqs ``after + 1 …`` of one turn; see ``_insert_rows``."""
    return _insert_rows(
        [
            TurnEvent(
                turn_id=turn_id, seq=after + i, type=e.type, data=json_safe(dict(e.data)), created_at=now
            )
            for i, e in enumerate(events, start=1)
        ],
        now=now,
    )


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
    meta = TurnEvent._meta
    qn = connection.ops.quote_name
    data_field, created_field = meta.get_field("data"), meta.get_field("created_at")
    created = created_field.get_db_prep_save(now, connection)
    params: list[Any] = []
    for row in rows:
        params += [row.turn_id, row.seq, row.type, data_field.get_db_prep_save(row.data, connection), created]
    columns = ", ".join(
        qn(meta.get_field(name).column) for name in ("turn", "seq", "type", "data", "created_at")
    )
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    sql = (
        f"INSERT INTO {qn(meta.db_table)} ({columns}) VALUES {values} "
        f"RETURNING {qn(meta.pk.column)}, {qn('turn_id')}, {qn('seq')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = {(turn_id, seq): pk for pk, turn_id, seq in cursor.fetchall()}
    frames: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        row.pk = ids[(row.turn_id, row.seq)]
        row._state.adding = False
        row._state.db = connection.alias
        frames.setdefault(row.turn_id, []).append(row.as_frame())
    # Ring only once the events are visible to readers: a subscriber woken
    # before the commit would read nothing and wait for the next tick.
    for turn_id, turn_frames in frames.items():
        transaction.on_commit(lambda t=turn_id, f=turn_frames: ring_turn(t, f))
    return rows


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


_CLAIM_COLUMNS = ("question", "context", "meta", "timings", "attempts", "max_steps", "job_id", "last_seq")


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
    meta = Turn._meta
    qn = connection.ops.quote_name

    def prep(name: str, value: Any) -> Any:
        return meta.get_field(name).get_db_prep_save(value, connection)

    returning = ", ".join(qn(meta.get_field(name).column) for name in _CLAIM_COLUMNS)
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {qn('status')} = %s, {qn('heartbeat_at')} = %s, "
        f"{qn('job_id')} = %s, {qn('updated_at')} = %s, {qn('phase')} = %s, "
        f"{qn('started_at')} = COALESCE({qn('started_at')}, %s), "
        f"{qn('attempts')} = CASE WHEN {qn('attempts')} < 1 THEN 1 ELSE {qn('attempts')} END, "
        f"{qn('last_seq')} = {qn('last_seq')} + %s "
        f"WHERE {qn(meta.pk.column)} = %s AND {qn('status')} = %s "
        f"RETURNING {returning}, {qn('started_at')} = {qn('heartbeat_at')}"
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
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    question, context, turn_meta, timings, attempts, max_steps, token, last_seq, fresh = row
    turn = ClaimedTurn(
        id=turn_id,
        question=question,
        context=_json_value(context),
        meta=_json_value(turn_meta),
        timings=_json_value(timings),
        attempts=int(attempts),
        max_steps=int(max_steps),
        job_id=token,
        last_seq=int(last_seq),
        fresh=bool(fresh),
    )
    new = list(events(turn))
    _check_types(new)
    if len(new) != count:
        raise ValueError(f"the claim reserved {count} seqs but {len(new)} events were given")
    rows = _insert_events(turn_id=turn_id, after=turn.last_seq - count, events=new, now=now)
    return turn, rows


def _json_value(raw: Any) -> dict[str, Any]:
    """A JSON column read by a plain cursor: text on SQLite, and on
    PostgreSQL too (Django loads jsonb as text and decodes it in the field)."""
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return dict(value or {})


class _Doorbell:
    """Delivers rings on one long-lived event loop, without blocking the writer.

    ``async_to_sync`` per ring would build an event loop for every append and
    wait for the channel layer — in a profile of ``run_eval`` that was most of
    the database threads' time. Rings are instead handed to a loop and not
    awaited: the doorbell is best effort, and subscribers read gaps by seq.

    Rings for the same turn that arrive before its previous ring was sent are
    coalesced into one doorbell carrying all their frames, so a burst of
    appends costs a few ``group_send`` calls, not one per event (a burst of
    500 used to exhaust channels_redis's connection pool).

    The loop is a daemon thread started on first use, unless a server adopts
    its own running loop with ``set_loop`` (daphne with the in-memory channel
    layer must, because that layer's queues belong to the server's loop).
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._adopted = False
        self._lock = threading.Lock()
        #: frames waiting to be sent, per turn; only touched on the loop
        self._pending: dict[int, list[dict[str, Any]]] = {}

    def set_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._loop = loop
            self._adopted = True

    def _nobody_can_listen(self) -> bool:
        """With the in-memory layer, only consumers of this process on an
        adopted loop can hear a ring; a process that adopted none
        (``run_eval``, a Celery worker without Redis) rings for nobody, and
        skipping that saves a thread wake-up per append."""
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        return not self._adopted and isinstance(get_channel_layer(), InMemoryChannelLayer)

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="agentlab-doorbell", daemon=True).start()
                self._loop = loop
            return self._loop

    def ring(self, turn_id: int, frames: list[dict[str, Any]]) -> None:
        if self._nobody_can_listen():
            return
        loop = self._get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._add(turn_id, frames)
        else:
            loop.call_soon_threadsafe(self._add, turn_id, frames)

    def _add(self, turn_id: int, frames: list[dict[str, Any]]) -> None:
        pending = self._pending.get(turn_id)
        if pending is not None:
            pending.extend(frames)
            return
        self._pending[turn_id] = list(frames)
        asyncio.get_running_loop().create_task(self._send(turn_id))

    async def _send(self, turn_id: int) -> None:
        frames = self._pending.pop(turn_id)
        await _group_send(turn_id, {"type": "turn.doorbell", "events": frames})


async def _group_send(turn_id: int, message: dict[str, Any]) -> None:
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
        if layer is not None:
            await layer.group_send(turn_group(turn_id), message)
    except Exception:
        logger.warning("doorbell for turn %s was not delivered", turn_id, exc_info=True)


doorbell = _Doorbell()


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
    qn = connection.ops.quote_name
    for name in fields:
        if meta.get_field(name).name in ("last_seq", "updated_at", "id"):
            raise ValueError(f"turn field {name!r} is managed by the event log")
    assigned, prepared = column_assignments(Turn, {"updated_at": now, **fields}, connection)
    assignments = [f"{qn('last_seq')} = {qn('last_seq')} + %s", *assigned]
    params: list[Any] = [count, *prepared, turn_id]
    where = f"{qn(meta.pk.column)} = %s"
    if holder is not None:
        where += f" AND {qn('job_id')} = %s AND {qn('status')} IN (%s, %s)"
        params.extend([holder, TurnStatus.RUNNING, TurnStatus.WAITING])
    sql = f"UPDATE {qn(meta.db_table)} SET {', '.join(assignments)} WHERE {where} RETURNING {qn('last_seq')}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        if holder is not None and Turn.objects.filter(pk=turn_id).exists():
            raise TurnNotHeld(f"turn {turn_id} is no longer held by {holder}")
        raise Turn.DoesNotExist(f"turn {turn_id} does not exist")
    return int(row[0]) - count


def ring_turn(turn_id: int, frames: Iterable[dict[str, Any]]) -> None:
    """Ring the doorbell of a turn's group, carrying the new event frames.

    Best effort by design (DESIGN.md §5): returns at once; a full channel, a
    missing layer or a broken connection is logged and swallowed — subscribers
    read the gap from the database on their next tick. Never raises.
    """
    try:
        doorbell.ring(turn_id, list(frames))
    except Exception:
        logger.warning("doorbell for turn %s could not be rung", turn_id, exc_info=True)


def events_after(*, turn_id: int, after: int = 0, limit: int | None = None) -> list[TurnEvent]:
    """Events of a turn with ``seq > after``, in seq order (at most ``limit``)."""
    qs = TurnEvent.objects.filter(turn_id=turn_id, seq__gt=after).order_by("seq")
    if limit is not None:
        qs = qs[:limit]
    return list(qs)
