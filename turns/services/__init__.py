"""Writes on conversations, turns and approvals (HackSoft "services"), by entity.

- ``turns``: create, cancel, interrupt, resume, retry, continue (state only);
- ``conversations``: conversations, and starting or re-queuing their turns
  (one active turn per conversation; hands turns to a job after the commit);
- ``approvals``: a human's decision, and the driver's open / poll / resume;
- ``feedback``: an end user's thumbs up or down on an answered chat turn;
- ``enqueue``: ``turn_enqueue``, the edge a queued turn leaves by after the
  commit (the jobs plug themselves in: ``turns.jobs``).

Import from here or from the module; both are the same functions.
"""

from __future__ import annotations

from turns.services.approvals import approval_decide, approval_open, approval_poll, approval_running_again
from turns.services.conversations import (
    conversation_create,
    conversation_delete,
    turn_continue_and_enqueue,
    turn_resume_and_enqueue,
    turn_retry_and_enqueue,
    turn_start,
)
from turns.services.feedback import feedback_give
from turns.services.turns import (
    RETRYABLE_STATUSES,
    NewTurn,
    turn_cancel,
    turn_continue,
    turn_create,
    turn_create_many,
    turn_interrupt,
    turn_resume,
    turn_retry,
    turns_set_output_limit,
    username_of,
)

__all__ = [
    "RETRYABLE_STATUSES",
    "NewTurn",
    "approval_decide",
    "approval_open",
    "approval_poll",
    "approval_running_again",
    "conversation_create",
    "conversation_delete",
    "feedback_give",
    "turn_cancel",
    "turn_continue",
    "turn_continue_and_enqueue",
    "turn_create",
    "turn_create_many",
    "turn_interrupt",
    "turn_resume",
    "turn_resume_and_enqueue",
    "turn_retry",
    "turn_retry_and_enqueue",
    "turn_start",
    "turns_set_output_limit",
    "username_of",
]
