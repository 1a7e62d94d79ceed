"""What differs between a chat turn and an evaluation turn (docs/architecture.md#the-driver).

The chat and evaluation paths differ only in how a pending approval is
handled and how long a review may take; the seed turn driver
the product was first described from shaped these hooks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.db import transaction

from agentlab.agent.loop import ApprovalDecision
from agentlab.agent.types import ToolCall
from common.db import DatabaseThreads
from turns.driver import lease
from turns.models import ApprovalStatus
from turns.services.approvals import approval_open, approval_poll, approval_running_again
from turns.signals import chat_turn_finished_send


class TurnPolicy:
    """What differs between a chat turn and an evaluation turn (docs/architecture.md#the-driver).

    ``approval`` decides a tool call that needs approval: ``"approved"`` runs
    it, ``"rejected"`` ends the turn as rejected, ``"unavailable"`` stops the
    loop with stop reason ``approval_required``.

    ``review`` turns the review phase on or off; ``None`` follows the
    ``AGENTLAB_REVIEW`` setting, and when that is unset the provider's
    default (``review_enabled``). ``review_wait_s()`` is how long the driver
    waits for a review before finishing without it (``None``: until it comes).
    ``streams``: whether the LLM calls are streamed and their text written as
    ``llm.delta`` events (``driver.record``) — chat only, a documented
    difference: nobody watches an evaluation turn, and its throughput is kept.
    """

    name = "base"
    streams = False

    def __init__(self, *, review: bool | None = None) -> None:
        self._review = review

    def review_enabled(self, provider: object = None) -> bool:
        """Whether answers are reviewed: this policy's ``review`` when set,
        else the ``AGENTLAB_REVIEW`` setting when set, else ``provider``'s
        own default (its ``review_by_default``; on when it has none)."""
        if self._review is not None:
            return self._review
        if settings.AGENTLAB_REVIEW is not None:
            return bool(settings.AGENTLAB_REVIEW)
        return bool(getattr(provider, "review_by_default", True))

    def review_wait_s(self) -> float | None:
        return None

    def on_finish(self, *, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
        """Called inside the transaction that writes the turn's terminal event,
        after the turn row has its final fields — ``turn_fields``, the fields
        just written (status, outcome, answer, evidence, reasoning, steps,
        stop_reason, usage, meta, timings …): what the caller records here
        commits or rolls back with the end of the turn."""

    async def approval(
        self, *, turn_id: int, call: ToolCall, db: DatabaseThreads, holder: str
    ) -> ApprovalDecision:
        return "unavailable"


class EvaluationPolicy(TurnPolicy):
    """Evaluation: nobody is there to approve, so a tool that needs approval
    cancels the turn with stop reason ``approval_required``; a review is
    waited for however long it takes.

    ``finish`` (called as ``finish(turn_id=…, turn_fields=…)``, see
    ``TurnPolicy.on_finish``), when given, runs in the terminal event's
    transaction — ``run_eval`` completes the example's prediction there, so a
    finished turn never lacks its prediction.
    """

    name = "evaluation"

    def __init__(self, finish: Callable[..., None] | None = None, *, review: bool | None = None) -> None:
        super().__init__(review=review)
        self._finish = finish

    def on_finish(self, *, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
        if self._finish is not None:
            self._finish(turn_id=turn_id, turn_fields=turn_fields)


class ChatPolicy(TurnPolicy):
    """Chat: the turn's owner is watching. A tool that needs approval waits
    for a human decision (status ``waiting``, see ``approval_wait``); a review
    is waited for at most ``REVIEW_WAIT_S`` seconds, and a late one is still
    recorded after the turn has finished."""

    name = "chat"
    streams = True

    def on_finish(self, *, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
        """Tell the layers above (``turns.signals.chat_turn_finished``) once
        the terminal event has committed: online evaluation starts from there,
        off the turn's own path."""
        transaction.on_commit(lambda: chat_turn_finished_send(turn_id))

    def review_wait_s(self) -> float | None:
        return float(settings.REVIEW_WAIT_S)

    async def approval(
        self, *, turn_id: int, call: ToolCall, db: DatabaseThreads, holder: str
    ) -> ApprovalDecision:
        return await approval_wait(turn_id=turn_id, call=call, db=db, holder=holder)


EVALUATION = EvaluationPolicy()
CHAT = ChatPolicy()


async def approval_wait(
    *, turn_id: int, call: ToolCall, db: DatabaseThreads, holder: str
) -> ApprovalDecision:
    """The chat policy's approval gate: open (or find) the approval of
    ``call``, then poll it every ``CANCEL_POLL_S`` until it is decided or
    expires. ``approved`` → the tool runs; ``rejected`` or ``expired`` →
    ``"rejected"``. The agent loop awaits this under its cancel guard, and the
    driver's watcher keeps writing heartbeats and reading the cancel flag
    meanwhile, so a cancel ends the wait within ``CANCEL_POLL_S``.
    """
    approval_id, status = await db.run(approval_open, turn_id=turn_id, call=call, holder=holder)
    while status == ApprovalStatus.PENDING:
        await asyncio.sleep(lease.CANCEL_POLL_S)
        status = await db.run(approval_poll, approval_id=approval_id, turn_id=turn_id, holder=holder)
    await db.run(approval_running_again, turn_id=turn_id, holder=holder)
    return "approved" if status == ApprovalStatus.APPROVED else "rejected"
