"""Reads on conversations, turns, events and approvals that the API, the chat
pages, the driver and tests share (HackSoft "selectors").

Ownership is checked here, once: an object the user may not see raises
``NotFound`` exactly as a missing one does (404, not 403, so ids do not leak
which objects exist). Staff see everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db.models import QuerySet

from common.errors import NotFound
from turns.models import TERMINAL_STATUSES, Approval, Conversation, EventType, Turn, TurnEvent, TurnFeedback

M = TypeVar("M", Conversation, Turn, Approval)


def _sees_all(user: User) -> bool:
    return bool(getattr(user, "is_staff", False))


def conversation_list(*, user: User, everyone: bool = False) -> QuerySet[Conversation]:
    """The user's conversations, newest activity first; ``everyone`` (staff only)
    lists all owners' conversations."""
    qs = Conversation.objects.select_related("owner").order_by("-updated_at", "-pk")
    if everyone and _sees_all(user):
        return qs
    return qs.filter(owner=user)


def _visible(qs: QuerySet[M], *, owner_path: str, user: User, pk: int, what: str) -> M:
    """The row ``pk`` of ``qs`` if ``user`` owns it (through ``owner_path``)
    or is staff; else ``NotFound`` — the same answer as for a missing row, so
    nobody learns what exists beyond their own (404, not 403)."""
    if not _sees_all(user):
        qs = qs.filter(**{owner_path: user})
    row = qs.filter(pk=pk).first()
    if row is None:
        raise NotFound(f"{what} {pk} not found")
    return row


def conversation_get(*, user: User, conversation_id: int) -> Conversation:
    """The conversation if ``user`` owns it (or is staff); else ``NotFound``."""
    return _visible(
        Conversation.objects.select_related("owner"),
        owner_path="owner",
        user=user,
        pk=conversation_id,
        what="conversation",
    )


def conversation_turns(*, conversation: Conversation) -> list[Turn]:
    """The turns of a conversation, oldest first."""
    return list(conversation.turns.order_by("position", "pk"))


def turn_get(*, user: User, turn_id: int) -> Turn:
    """The turn if ``user`` owns it (or is staff); else ``NotFound``."""
    return _visible(Turn.objects.all(), owner_path="owner", user=user, pk=turn_id, what="turn")


def approval_get(*, user: User, approval_id: int) -> Approval:
    """The approval if ``user`` owns its turn (or is staff); else ``NotFound``."""
    return _visible(
        Approval.objects.select_related("turn"),
        owner_path="turn__owner",
        user=user,
        pk=approval_id,
        what="approval",
    )


def events_after(*, turn_id: int, after: int = 0, limit: int | None = None) -> list[TurnEvent]:
    """Events of a turn with ``seq > after``, in seq order (at most ``limit``)."""
    qs = TurnEvent.objects.filter(turn_id=turn_id, seq__gt=after).order_by("seq")
    if limit is not None:
        qs = qs[:limit]
    return list(qs)


def turn_meta(*, turn_id: int) -> dict[str, Any]:
    """The turn's ``meta`` as stored now (``turns.meta`` reads it). Raises
    ``Turn.DoesNotExist``."""
    return dict(Turn.objects.values_list("meta", flat=True).get(pk=turn_id) or {})


def turn_checked(*, turn_id: int, attempt: int) -> bool:
    """Whether attempt ``attempt`` of the turn has its ``check`` events already."""
    return TurnEvent.objects.filter(turn_id=turn_id, type=EventType.CHECK, data__attempt=attempt).exists()


def approval_status_of(*, turn_id: int, call_id: str) -> str | None:
    """The status of the approval of tool call ``call_id`` in the turn, if it has one."""
    return (
        Approval.objects.filter(turn_id=turn_id, tool_call__id=call_id)
        .values_list("status", flat=True)
        .first()
    )


@dataclass(frozen=True)
class EventPage:
    """``events``: seq > after, in order. ``ended``: the page includes (or the
    client already has) the turn's last event and the turn is finished — the
    HTTP twin of the websocket's ``stream.end``. ``status``: the turn's status
    when the page was read."""

    turn_id: int
    events: list[TurnEvent]
    status: str
    last_seq: int
    ended: bool
    after_in: int = 0

    @property
    def next_after(self) -> int:
        """The ``after`` to ask with next: the last seq in this page, or the one asked with."""
        return self.events[-1].seq if self.events else self.after_in


def turn_events_page(*, turn: Turn, after: int = 0, limit: int = 500) -> EventPage:
    """Events of ``turn`` with ``seq > after`` (at most ``limit``), with the
    websocket's contract (docs/chat-and-api.md#the-websocket-protocol).

    The turn row is read *before* the events: its status and ``last_seq``
    change in the same transaction as the terminal event is written, so a
    turn read as finished has all its events visible to the read that
    follows; reading in the other order could say "ended" without the
    terminal event in the page.
    """
    status, last_seq = Turn.objects.filter(pk=turn.pk).values_list("status", "last_seq").get()
    events = events_after(turn_id=turn.pk, after=after, limit=limit)
    reached = events[-1].seq if events else after
    ended = status in TERMINAL_STATUSES and reached >= last_seq
    return EventPage(
        turn_id=turn.pk, events=events, status=status, last_seq=last_seq, ended=ended, after_in=after
    )


def turn_summary(turn: Turn) -> dict[str, Any]:
    """A plain dict of what the chat page shows of a turn before its events load."""
    return {
        "id": turn.pk,
        "position": turn.position,
        "question": turn.question,
        "status": turn.status,
        "last_seq": turn.last_seq,
    }


def feedback_of(*, user: User, turns: Iterable[Turn]) -> dict[str, dict[str, str]]:
    """``user``'s current feedback on each of ``turns`` that has one:
    ``{str(turn id): {"rating", "comment"}}`` (JSON object keys are strings)."""
    rows = TurnFeedback.objects.filter(user=user, current=True, turn__in=[t.pk for t in turns])
    return {str(f.turn_id): {"rating": f.rating, "comment": f.comment} for f in rows}


def turn_history_data(*, turn_id: int) -> dict[str, Any] | None:
    """The payload of the turn's last ``history`` event (``HistoryData``:
    what it was given of its conversation), or ``None`` when it has none."""
    event = TurnEvent.objects.filter(turn_id=turn_id, type=EventType.HISTORY).order_by("-seq").first()
    return event.data if event is not None and isinstance(event.data, dict) else None
