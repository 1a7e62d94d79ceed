"""Writes on approvals: a human's decision, and the driver's open / poll / resume.

Of a human decision and an expiry exactly one counts: both are conditional
updates (``pending → …``) under the turn's row lock, taken first by both.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentlab.agent.text import json_safe
from agentlab.agent.types import ToolCall
from common.errors import NotFound, StateConflict
from turns.event_types import ApprovalRequestedData, ApprovalResolvedData
from turns.events import NewEvent, TurnNotHeld, event_append_many
from turns.models import Approval, ApprovalStatus, EventType, Turn, TurnStatus


def approval_decide(*, approval_id: int, approve: bool, acting_user: User) -> Approval:
    """Approve or reject a pending approval; exactly one decision counts.

    The decision is a conditional update (``status = pending`` and the
    deadline, if any, not passed), so of two concurrent decisions one updates
    the row and the other finds nothing to update and gets ``StateConflict``
    (healthchecks ``sendalerts``). The winner appends ``approval.resolved``
    (``{"approval_id", "status", "by", "tool"}``) in the same transaction; the
    driver waiting on the approval reads the row. Raises ``NotFound`` for an
    unknown approval, ``StateConflict`` for one already decided or expired.
    """
    now = timezone.now()
    status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
    with transaction.atomic():
        found = Approval.objects.filter(pk=approval_id).values_list("turn_id", flat=True).first()
        if found is None:
            raise NotFound(f"approval {approval_id} not found")
        # Lock the turn first: a turn that ended some other way (cancelled,
        # failed) takes no decision, and it cannot end while we decide.
        turn = Turn.objects.select_for_update().get(pk=found)
        open_ = Q(pk=approval_id, status=ApprovalStatus.PENDING) & (
            Q(deadline__isnull=True) | Q(deadline__gt=now)
        )
        updated = 0
        if not turn.is_terminal:
            updated = Approval.objects.filter(open_).update(
                status=status, decided_by=acting_user, decided_at=now
            )
        approval = Approval.objects.get(pk=approval_id)
        if updated != 1:
            if approval.status == ApprovalStatus.PENDING and turn.is_terminal:
                raise StateConflict(
                    f"approval {approval_id} cannot be decided: its turn has finished ({turn.status})"
                )
            state = approval.status if approval.status != ApprovalStatus.PENDING else "expired"
            raise StateConflict(f"approval {approval_id} cannot be decided: it is {state}")
        event_append_many(
            turn_id=approval.turn_id,
            events=[
                NewEvent(
                    EventType.APPROVAL_RESOLVED,
                    ApprovalResolvedData(
                        approval_id=approval.pk,
                        status=status,
                        by=acting_user.get_username(),
                        tool=(approval.tool_call or {}).get("name"),
                    ),
                )
            ],
        )
    return approval


# --- the driver's side (holder-guarded: only the driver holding the turn writes) -------


def approval_open(*, turn_id: int, call: ToolCall, holder: str) -> tuple[int, str]:
    """Find the approval of ``call`` (by tool call id) or create it; return
    ``(approval_id, status)``.

    A decided approval (the turn was resumed after a human decided) is
    returned as it is and nothing is written. Otherwise, in one transaction,
    a new approval row (deadline ``APPROVAL_TIMEOUT_S`` from now, or none) is
    created and ``approval.requested`` ``{"approval_id", "call", "deadline"}``
    appended with the turn set to ``waiting`` — only while ``holder`` holds
    the turn (``TurnNotHeld`` otherwise, and the row is rolled back). A pending
    approval found again on resume gets the event again, with ``"resumed": true``.
    """
    with transaction.atomic():
        approval = Approval.objects.filter(turn_id=turn_id, tool_call__id=call.id).order_by("pk").first()
        if approval is not None and approval.status != ApprovalStatus.PENDING:
            return approval.pk, approval.status
        data = ApprovalRequestedData()
        if approval is None:
            timeout = settings.APPROVAL_TIMEOUT_S
            deadline = timezone.now() + timedelta(seconds=float(timeout)) if timeout else None
            approval = Approval.objects.create(
                turn_id=turn_id, tool_call=json_safe(call.to_dict()), deadline=deadline
            )
        else:
            data["resumed"] = True
        data["approval_id"] = approval.pk
        data["call"] = call.to_dict()  # type: ignore[typeddict-item]
        data["deadline"] = approval.deadline.isoformat() if approval.deadline else None
        event_append_many(
            turn_id=turn_id,
            events=[NewEvent(EventType.APPROVAL_REQUESTED, data)],
            turn_fields={"status": TurnStatus.WAITING},
            holder=holder,
        )
    return approval.pk, ApprovalStatus.PENDING


def approval_poll(*, approval_id: int, turn_id: int, holder: str) -> str:
    """The approval's status; a pending one past its deadline is expired here.

    Expiry is a conditional update (``pending → expired``), so it and a
    concurrent human decision cannot both count: whichever updates the row
    first wins and the other finds nothing to update (``approval_decide``
    then answers 409). The expiry's ``approval.resolved`` ``{"approval_id",
    "status": "expired", "by": None, "tool"}`` is written in the same
    transaction, holder-guarded. Human decisions write their own
    ``approval.resolved`` (``approval_decide``); this never writes a second.
    """
    approval = Approval.objects.get(pk=approval_id)
    now = timezone.now()
    if (
        approval.status == ApprovalStatus.PENDING
        and approval.deadline is not None
        and approval.deadline <= now
    ):
        with transaction.atomic():
            # turn row first, as approval_decide does: one lock order, no deadlock
            list(Turn.objects.select_for_update().filter(pk=turn_id).values_list("pk", flat=True))
            expired = Approval.objects.filter(pk=approval_id, status=ApprovalStatus.PENDING).update(
                status=ApprovalStatus.EXPIRED, decided_at=now
            )
            if expired == 1:
                event_append_many(
                    turn_id=turn_id,
                    events=[
                        NewEvent(
                            EventType.APPROVAL_RESOLVED,
                            ApprovalResolvedData(
                                approval_id=approval_id,
                                status=ApprovalStatus.EXPIRED,
                                by=None,
                                tool=(approval.tool_call or {}).get("name"),
                            ),
                        )
                    ],
                    holder=holder,
                )
                return ApprovalStatus.EXPIRED
        approval.refresh_from_db()
    return approval.status


def approval_running_again(*, turn_id: int, holder: str) -> None:
    """``waiting → running`` once the approval is decided (holder-guarded);
    ``TurnNotHeld`` when the turn is no longer held by ``holder``."""
    updated = Turn.objects.filter(pk=turn_id, job_id=holder, status=TurnStatus.WAITING).update(
        status=TurnStatus.RUNNING, heartbeat_at=timezone.now()
    )
    if (
        updated != 1
        and not Turn.objects.filter(pk=turn_id, job_id=holder, status=TurnStatus.RUNNING).exists()
    ):
        raise TurnNotHeld(f"turn {turn_id} is no longer held by {holder}")
