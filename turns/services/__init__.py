"""Writes on conversations, turns and approvals (HackSoft "services"), by entity.

- ``turns``: create, cancel, interrupt, resume, retry, continue (state only);
- ``conversations``: conversations, and starting or re-queuing their turns
  (one active turn per conversation; hands turns to a job after the commit);
- ``approvals``: a human's decision, and the driver's open / poll / resume;
- ``sweep``: interrupting turns whose driver is gone, re-queuing lost ones.

Import from here or from the module; both are the same functions.
"""

from __future__ import annotations

from .approvals import approval_decide, approval_open, approval_poll, approval_running_again
from .conversations import (
    conversation_create,
    conversation_delete,
    turn_continue_and_enqueue,
    turn_resume_and_enqueue,
    turn_retry_and_enqueue,
    turn_start,
)
from .sweep import (
    REQUEUE_BATCH,
    SweepResult,
    turns_interrupt_gone,
    turns_requeue_lost,
    turns_sweep,
    turns_sweep_stale,
)
from .turns import (
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
    "REQUEUE_BATCH",
    "RETRYABLE_STATUSES",
    "NewTurn",
    "SweepResult",
    "approval_decide",
    "approval_open",
    "approval_poll",
    "approval_running_again",
    "conversation_create",
    "conversation_delete",
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
    "turns_interrupt_gone",
    "turns_requeue_lost",
    "turns_set_output_limit",
    "turns_sweep",
    "turns_sweep_stale",
    "username_of",
]
