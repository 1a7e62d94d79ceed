"""API routes for conversations, turns, their event logs and approvals (docs/chat-and-api.md#the-http-api).

Session users only (``apikeys.auth.SessionAuth``, the API's default); API keys get 403 here.
Ownership is checked by ``turns.selectors`` (404 for what the caller may not
see; staff see all), state rules by ``turns.services`` (409).
"""

# No ``from __future__ import annotations``: django-ninja reads the handlers'
# annotations at import time to build their schemas.

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field, Path, Query, Router, Schema, Status
from ninja.pagination import paginate
from pydantic import AfterValidator

from agentlab.agent.text import clean_text
from common.api import ERRORS, MAX_ID, AuthedRequest, ErrorOut, Pagination
from turns import selectors, services
from turns.attempts import usage_total
from turns.models import MAX_QUESTION_CHARS, Approval, Conversation, FeedbackRating, Turn, TurnFeedback


def _non_blank(value: str) -> str:
    value = clean_text(value)
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Id = Annotated[int, Path(ge=1, le=MAX_ID)]
CleanText = Annotated[str, AfterValidator(clean_text)]

router = Router(tags=["conversations and turns"])


# --- schemas ------------------------------------------------------------------------


class ConversationIn(Schema):
    title: CleanText = Field("", max_length=200)
    history: Literal["", "answers", "full"] = Field(
        "",
        description="what each turn is given of the turns before it: their questions and answers "
        "(answers), also their tool calls and results (full); empty: the AGENTLAB_CHAT_HISTORY setting",
    )


class ConversationOut(Schema):
    id: int
    title: str
    history: str
    owner: str
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_owner(obj: Conversation) -> str:
        return obj.owner.get_username()


class TurnSummaryOut(Schema):
    id: int
    position: int
    question: str
    status: str
    outcome: str
    last_seq: int
    created_at: datetime


class ConversationDetailOut(ConversationOut):
    turns: list[TurnSummaryOut]
    active_turn_id: int | None

    @staticmethod
    def resolve_turns(obj: Conversation) -> list[Turn]:
        return obj.turn_list  # type: ignore[attr-defined]

    @staticmethod
    def resolve_active_turn_id(obj: Conversation) -> int | None:
        return next((t.pk for t in obj.turn_list if t.is_active), None)  # type: ignore[attr-defined]


class TurnIn(Schema):
    question: Annotated[str, AfterValidator(_non_blank)] = Field(
        ..., min_length=1, max_length=MAX_QUESTION_CHARS
    )


class TurnStartedOut(Schema):
    turn_id: int


class TurnOut(Schema):
    id: int
    conversation_id: int | None
    kind: str
    position: int
    question: str
    status: str
    phase: str
    outcome: str
    answer: str
    evidence: str
    reasoning: str
    clarifying_question: str
    stop_reason: str
    model: str
    steps: int
    max_steps: int
    attempts: int
    usage: dict[str, Any] = Field(
        description="tokens, calls and cost of all the turn's attempts, agent and review calls apart "
        "(by_role) and per model (by_model); cost null when unknown"
    )
    timings: dict[str, Any]
    last_seq: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_usage(obj: Turn) -> dict[str, Any]:
        return usage_total(obj)


class EventOut(Schema):
    seq: int
    type: str
    data: dict[str, Any]
    at: datetime


class EventPageOut(Schema):
    """Events with ``seq > after`` in order; ``ended`` when the turn is finished
    and the page reaches its last event (the websocket's ``stream.end``)."""

    turn_id: int
    status: str
    last_seq: int
    ended: bool
    next_after: int = Field(description="pass as `after` to get what follows")
    events: list[EventOut]


class ApprovalOut(Schema):
    id: int
    turn_id: int
    tool_call: dict[str, Any]
    status: str
    decided_by: str | None
    decided_at: datetime | None
    deadline: datetime | None

    @staticmethod
    def resolve_decided_by(obj: Approval) -> str | None:
        return obj.decided_by.get_username() if obj.decided_by is not None else None


def _detail(conversation: Conversation) -> Conversation:
    conversation.turn_list = selectors.conversation_turns(conversation=conversation)  # type: ignore[attr-defined]
    return conversation


# --- conversations --------------------------------------------------------------------


@router.post("/conversations", response={201: ConversationOut, **ERRORS}, summary="Create a conversation")
def conversation_create(request: AuthedRequest, payload: ConversationIn) -> Status:
    conversation = services.conversation_create(
        owner=request.auth, title=payload.title, history=payload.history
    )
    return Status(201, conversation)


@router.get(
    "/conversations", response={200: list[ConversationOut], **ERRORS}, summary="List my conversations"
)
@paginate(Pagination)
def conversation_list(
    request: AuthedRequest, everyone: bool = Query(False, description="staff: every owner's")
) -> Any:
    return selectors.conversation_list(user=request.auth, everyone=everyone)


@router.get(
    "/conversations/{conversation_id}",
    response={200: ConversationDetailOut, **ERRORS},
    summary="A conversation with its turns",
)
def conversation_get(request: AuthedRequest, conversation_id: Id) -> Conversation:
    return _detail(selectors.conversation_get(user=request.auth, conversation_id=conversation_id))


@router.delete(
    "/conversations/{conversation_id}",
    response={204: None, **ERRORS},
    summary="Delete a conversation (its active turn is cancelled first)",
)
def conversation_delete(request: AuthedRequest, conversation_id: Id) -> Status:
    conversation = selectors.conversation_get(user=request.auth, conversation_id=conversation_id)
    services.conversation_delete(conversation_id=conversation.pk)
    return Status(204, None)


@router.post(
    "/conversations/{conversation_id}/turns",
    response={202: TurnStartedOut, 409: ErrorOut, **ERRORS},
    summary="Ask a question: start a turn in the background",
)
def turn_start(request: AuthedRequest, conversation_id: Id, payload: TurnIn) -> Status:
    conversation = selectors.conversation_get(user=request.auth, conversation_id=conversation_id)
    turn = services.turn_start(conversation=conversation, question=payload.question, acting_user=request.auth)
    return Status(202, {"turn_id": turn.pk})


# --- turns ------------------------------------------------------------------------------


@router.get("/turns/{turn_id}", response={200: TurnOut, **ERRORS}, summary="A turn")
def turn_get(request: AuthedRequest, turn_id: Id) -> Turn:
    return selectors.turn_get(user=request.auth, turn_id=turn_id)


@router.get(
    "/turns/{turn_id}/events",
    response={200: EventPageOut, **ERRORS},
    summary="A turn's events after a seq (the websocket's contract, for clients without one)",
)
def turn_events(
    request: AuthedRequest,
    turn_id: Id,
    after: int = Query(0, ge=0, le=2**31 - 1, description="the last seq you have"),
    limit: int = Query(500, ge=1, le=1000),
) -> dict[str, Any]:
    turn = selectors.turn_get(user=request.auth, turn_id=turn_id)
    page = selectors.turn_events_page(turn=turn, after=after, limit=limit)
    return {
        "turn_id": page.turn_id,
        "status": page.status,
        "last_seq": page.last_seq,
        "ended": page.ended,
        "next_after": page.next_after,
        "events": [e.as_frame() for e in page.events],
    }


@router.post(
    "/turns/{turn_id}/cancel",
    response={200: TurnOut, 409: ErrorOut, **ERRORS},
    summary="Cancel a turn (a running one stops at its next step)",
)
def turn_cancel(request: AuthedRequest, turn_id: Id) -> Turn:
    turn = selectors.turn_get(user=request.auth, turn_id=turn_id)
    return services.turn_cancel(turn_id=turn.pk, acting_user=request.auth)


@router.post(
    "/turns/{turn_id}/resume",
    response={202: TurnOut, 409: ErrorOut, **ERRORS},
    summary="Resume an interrupted or failed turn where it stopped",
)
def turn_resume(request: AuthedRequest, turn_id: Id) -> Status:
    turn = selectors.turn_get(user=request.auth, turn_id=turn_id)
    return Status(202, services.turn_resume_and_enqueue(turn_id=turn.pk, acting_user=request.auth))


@router.post(
    "/turns/{turn_id}/retry",
    response={202: TurnOut, 409: ErrorOut, **ERRORS},
    summary="Retry a failed, interrupted or cancelled turn as a new attempt",
)
def turn_retry(request: AuthedRequest, turn_id: Id) -> Status:
    turn = selectors.turn_get(user=request.auth, turn_id=turn_id)
    return Status(202, services.turn_retry_and_enqueue(turn_id=turn.pk, acting_user=request.auth))


class ContinueIn(Schema):
    extra_steps: int = Field(..., ge=1, le=100)


@router.post(
    "/turns/{turn_id}/continue",
    response={202: TurnOut, 409: ErrorOut, **ERRORS},
    summary="Continue a turn that failed with max_steps, with more steps (a new attempt)",
)
def turn_continue(request: AuthedRequest, turn_id: Id, payload: ContinueIn) -> Status:
    turn = selectors.turn_get(user=request.auth, turn_id=turn_id)
    return Status(
        202,
        services.turn_continue_and_enqueue(
            turn_id=turn.pk, extra_steps=payload.extra_steps, acting_user=request.auth
        ),
    )


# --- feedback -----------------------------------------------------------------------------


class FeedbackIn(Schema):
    rating: FeedbackRating = Field(..., description='"up" or "down"')
    comment: CleanText = Field("", max_length=4000)


class FeedbackOut(Schema):
    turn_id: int
    user: str
    rating: str
    comment: str
    created_at: datetime
    history: int = Field(description="how many ratings this user gave the turn, this one included")

    @staticmethod
    def resolve_user(obj: TurnFeedback) -> str:
        return obj.user.get_username()

    @staticmethod
    def resolve_history(obj: TurnFeedback) -> int:
        return TurnFeedback.objects.filter(turn_id=obj.turn_id, user_id=obj.user_id).count()


@router.post(
    "/turns/{turn_id}/feedback",
    response={200: FeedbackOut, 409: ErrorOut, **ERRORS},
    summary="Rate an answered chat turn: thumbs up or down and a comment (yours replaces your last)",
)
def turn_feedback(request: AuthedRequest, turn_id: Id, payload: FeedbackIn) -> TurnFeedback:
    turn = selectors.turn_get(user=request.auth, turn_id=turn_id)
    return services.feedback_give(
        turn_id=turn.pk, user=request.auth, rating=payload.rating, comment=payload.comment
    )


# --- approvals ----------------------------------------------------------------------------


@router.post(
    "/approvals/{approval_id}/approve",
    response={200: ApprovalOut, 409: ErrorOut, **ERRORS},
    summary="Approve a pending tool call (exactly one decision counts)",
)
def approval_approve(request: AuthedRequest, approval_id: Id) -> Approval:
    approval = selectors.approval_get(user=request.auth, approval_id=approval_id)
    return services.approval_decide(approval_id=approval.pk, approve=True, acting_user=request.auth)


@router.post(
    "/approvals/{approval_id}/reject",
    response={200: ApprovalOut, 409: ErrorOut, **ERRORS},
    summary="Reject a pending tool call (exactly one decision counts)",
)
def approval_reject(request: AuthedRequest, approval_id: Id) -> Approval:
    approval = selectors.approval_get(user=request.auth, approval_id=approval_id)
    return services.approval_decide(approval_id=approval.pk, approve=False, acting_user=request.auth)
