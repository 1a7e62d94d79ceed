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

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from .models import EventType, Turn, TurnEvent

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


def event_append(*, turn_id: int, type: str, data: Mapping[str, Any] | None = None, turn_fields: Mapping[str, Any] | None = None) -> TurnEvent:
    """Append one event to a turn's log; see ``event_append_many``."""
    return event_append_many(turn_id=turn_id, events=[NewEvent(type, data or {})], turn_fields=turn_fields)[-1]


def event_append_many(
    *,
    turn_id: int,
    events: Sequence[NewEvent],
    turn_fields: Mapping[str, Any] | None = None,
) -> list[TurnEvent]:
    """Append events to a turn's log in one transaction and ring its doorbell.

    The turn row is locked (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's
    IMMEDIATE transaction holds the database write lock), so concurrent
    appenders get consecutive seqs with no gap. ``turn_fields`` are written to
    the turn in the same transaction (status, answer …), so the log and the
    turn row never disagree. Payloads pass through ``json_safe``.

    Returns the new events with their seqs. Raises ``ValueError`` for an
    unknown event type and ``Turn.DoesNotExist`` for an unknown turn; nothing
    is written then.
    """
    if not events:
        raise ValueError("event_append_many needs at least one event")
    for event in events:
        if event.type not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {event.type!r}; expected one of {sorted(_EVENT_TYPES)}")
    now = timezone.now()
    with transaction.atomic():
        last_seq = Turn.objects.select_for_update().values_list("last_seq", flat=True).get(pk=turn_id)
        rows = [
            TurnEvent(turn_id=turn_id, seq=last_seq + i, type=e.type, data=json_safe(dict(e.data)), created_at=now)
            for i, e in enumerate(events, start=1)
        ]
        TurnEvent.objects.bulk_create(rows)
        fields = {k: clean_text(v) if isinstance(v, str) else v for k, v in (turn_fields or {}).items()}
        Turn.objects.filter(pk=turn_id).update(last_seq=last_seq + len(rows), updated_at=now, **fields)
        frames = [r.as_frame() for r in rows]
        # Ring only once the events are visible to readers: a subscriber woken
        # before the commit would read nothing and wait for the next tick.
        transaction.on_commit(lambda: ring_turn(turn_id, frames))
    return rows


def ring_turn(turn_id: int, frames: Iterable[dict[str, Any]]) -> None:
    """Ring the doorbell of a turn's group, carrying the new event frames.

    Best effort by design (DESIGN.md §5): a full channel, a missing layer or a
    broken connection is logged and swallowed — subscribers read the gap from
    the database on their next tick. Never raises.
    """
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
        if layer is None:
            return
        async_to_sync(layer.group_send)(turn_group(turn_id), {"type": "turn.doorbell", "events": list(frames)})
    except Exception:  # noqa: BLE001 - the doorbell may be lost, the log is not
        logger.warning("doorbell for turn %s was not delivered", turn_id, exc_info=True)


def events_after(*, turn_id: int, after: int = 0, limit: int | None = None) -> list[TurnEvent]:
    """Events of a turn with ``seq > after``, in seq order (at most ``limit``)."""
    qs = TurnEvent.objects.filter(turn_id=turn_id, seq__gt=after).order_by("seq")
    if limit is not None:
        qs = qs[:limit]
    return list(qs)
