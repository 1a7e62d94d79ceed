"""A turn's conversation as its history (docs/architecture.md#the-driver; issue 41).

A turn that belongs to a conversation with earlier turns (lower ``position``)
is given them — of any kind, chat or evaluation: an evaluation turn without a
conversation keeps its single question. ``turn_history`` gives the drive its
``History`` (``agentlab.agent.history``):

- the first time, it reads the earlier turns (``earlier_turns``), fits them to
  the budget of the drive's provider and writes the result as a ``history``
  event **before** the first LLM call — which turn ids, how many tokens, what
  was dropped and why, and the messages themselves;
- every later time (a resume, a person's retry or continue, a review's
  retry) it gives the turn the recorded messages again, never reading the
  conversation anew: an earlier turn retried meanwhile does not change what
  this turn's requests hold, so they are the same byte for byte.

The mode is the conversation's own ``history`` when set, else
``AGENTLAB_CHAT_HISTORY``. The context window is the provider's
(``context_window``: the embedded model's ``AGENTLAB_LOCAL_N_CTX``), else
``AGENTLAB_LLM_CONTEXT_WINDOW``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any, cast

from django.conf import settings
from django.db.models import Subquery

from agentlab.agent.history import (
    HISTORY_MODES,
    EarlierTurn,
    History,
    HistoryMode,
    fit_history,
    history_budget,
    message_tokens,
    token_counter_of,
)
from agentlab.agent.loop import AgentLoop
from agentlab.agent.tools import ToolContext

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.driver.context import DriveContext
from turns.driver.replay import attempt_steps
from turns.event_types import HistoryData
from turns.events import NewEvent
from turns.models import Conversation, EventType, Turn
from turns.selectors import turn_history_data


@dataclass(frozen=True)
class HistoryInputs:
    """What ``history_inputs`` read: the ``recorded`` history event's payload
    (``None``: none yet), else the ``mode`` and the ``earlier`` turns."""

    recorded: dict[str, Any] | None
    mode: HistoryMode
    earlier: list[EarlierTurn]


def history_mode(*, conversation_id: int) -> HistoryMode:
    """The conversation's ``history`` mode, else ``AGENTLAB_CHAT_HISTORY``."""
    own = Conversation.objects.filter(pk=conversation_id).values_list("history", flat=True).first()
    mode = own or settings.AGENTLAB_CHAT_HISTORY
    return cast(HistoryMode, mode if mode in HISTORY_MODES else "answers")


def earlier_turns(*, turn_id: int, conversation_id: int, mode: HistoryMode) -> list[EarlierTurn]:
    """The turns of the conversation before turn ``turn_id`` (lower
    position), oldest first; under ``full`` each given one with the steps
    of its last attempt (those it continued included: ``attempt_steps``)."""
    position = Turn.objects.filter(pk=turn_id).values("position")
    rows = (
        Turn.objects.filter(conversation_id=conversation_id, position__lt=Subquery(position))
        .exclude(pk=turn_id)
        .order_by("position", "pk")
        .values_list(
            "pk", "position", "question", "status", "outcome", "answer", "clarifying_question", "attempts"
        )
    )
    turns = []
    for pk, pos, question, status, outcome, answer, clarifying, attempts in rows:
        turn = EarlierTurn(
            turn_id=pk,
            position=pos,
            question=question,
            status=status,
            outcome=outcome,
            reply=clarifying if outcome == "asked" else answer,
        )
        if mode == "full" and turn.given and attempts:
            inherited, own = attempt_steps(turn_id=pk, attempt=attempts)
            turn = replace(turn, steps=(*inherited, *own))
        turns.append(turn)
    return turns


def history_inputs(*, turn_id: int, conversation_id: int, fresh: bool) -> HistoryInputs:
    """The recorded history of a turn that ran before (not ``fresh``), else
    what a new one is made from (one database thread hop)."""
    recorded = None if fresh else turn_history_data(turn_id=turn_id)
    if recorded is not None:
        return HistoryInputs(recorded=recorded, mode="answers", earlier=[])
    mode = history_mode(conversation_id=conversation_id)
    return HistoryInputs(
        recorded=None,
        mode=mode,
        earlier=earlier_turns(turn_id=turn_id, conversation_id=conversation_id, mode=mode),
    )


def context_window(provider: Any) -> int:
    """The provider's context window in tokens (its ``context_window``),
    else ``AGENTLAB_LLM_CONTEXT_WINDOW``."""
    window = getattr(provider, "context_window", None)
    return (
        int(window) if isinstance(window, int) and window > 0 else int(settings.AGENTLAB_LLM_CONTEXT_WINDOW)
    )


def fitted_history(
    inputs: HistoryInputs, *, loop: AgentLoop, question: str, context: ToolContext, reply_tokens: int
) -> History:
    """``inputs``' earlier turns fitted to what ``loop``'s provider leaves
    (``history_budget``) once the turn's own first request — the system
    prompt, the question and the tool specs, exactly as ``loop`` sends them
    — and the reply are counted. Counting may tokenize: run it off the event loop."""
    count, counted = token_counter_of(loop.provider)
    base = loop.build_messages(question, [], context=context)
    offered = loop.offered_tools(question, context)
    specs = offered.specs() if loop.native_tools and len(offered) else None
    request_tokens = message_tokens(base, count) + (
        count(json.dumps(specs, ensure_ascii=False)) if specs else 0
    )
    window = context_window(loop.provider)
    return fit_history(
        inputs.earlier,
        mode=inputs.mode,
        native_tools=loop.native_tools,
        ends_turn=lambda name: getattr(loop.tools.get(name), "ends_turn", None) is not None,
        budget=history_budget(window=window, reply_tokens=reply_tokens, request_tokens=request_tokens),
        window=window,
        reply_tokens=reply_tokens,
        count=count,
        counted=counted,
    )


async def turn_history(
    ctx: DriveContext,
    *,
    loop: AgentLoop,
    question: str,
    context: ToolContext,
    attempt: int,
    reply_tokens: int,
) -> History | None:
    """The history the turn is given (module docstring): the recorded one,
    else a new one written as a ``history`` event now; ``None`` when the
    turn has no conversation or is its first turn. Raises what the event's
    write raises (``TurnNotHeld``)."""
    turn = ctx.turn
    if turn.conversation_id is None:
        return await _replayed_history(ctx, attempt=attempt)
    inputs = await ctx.db.run(
        history_inputs, turn_id=turn.id, conversation_id=turn.conversation_id, fresh=turn.fresh
    )
    if inputs.recorded is not None:
        return History.from_data(inputs.recorded)
    if not inputs.earlier:
        return None
    history = await asyncio.to_thread(
        fitted_history, inputs, loop=loop, question=question, context=context, reply_tokens=reply_tokens
    )
    written = await ctx.db.run(
        event_log.event_append_many,
        turn_id=ctx.turn_id,
        events=[NewEvent(EventType.HISTORY, cast(HistoryData, history.to_data(attempt=attempt)))],
        holder=ctx.holder,
    )
    # as stored (``json_safe``), which is what a later drive reads back: the same bytes
    return History.from_data(written[0].data)


async def _replayed_history(ctx: DriveContext, *, attempt: int) -> History | None:
    """A replay turn (no conversation of its own) is given what the turn it
    replays was given (``ReplayScript.history``), recorded as its own
    ``history`` event on its first drive and read back on a later one; any
    other turn without a conversation: ``None``."""
    script = ctx.replay
    if script is None or not script.history:
        return None
    recorded = None if ctx.turn.fresh else await ctx.db.run(turn_history_data, turn_id=ctx.turn_id)
    if recorded is not None:
        return History.from_data(recorded)
    written = await ctx.db.run(
        event_log.event_append_many,
        turn_id=ctx.turn_id,
        events=[NewEvent(EventType.HISTORY, cast(HistoryData, {**script.history, "attempt": attempt}))],
        holder=ctx.holder,
    )
    return History.from_data(written[0].data)
