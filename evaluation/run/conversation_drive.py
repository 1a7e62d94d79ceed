"""Driving a conversation example (docs/evaluating.md#conversation-examples):
its turns one after another, each through the same driver as any turn
(``turns.driver.drive_turn``), which gives a turn of a conversation the
conversation's earlier turns as its history.

The next user message is the script's next turn, or the simulated user's
(``evaluation.run.simulator``); the conversation ends when the script is
done, when the simulated user writes the stop marker or reaches its
``max_turns``, when a turn does not finish (failed, cancelled), or when the
simulator fails — and then the prediction is completed from the turns
(``evaluation.run.conversation_score``). A resumed run starts at the
conversation's latest turn (``evaluation.run.plan``) and goes on from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentlab.agent.usage import UsageTotals
from common.db import DatabaseThreads
from evaluation.datasets.conversation_spec import SIMULATED_KEY, TURNS_KEY, conversation_kind
from evaluation.models import Example, Prediction, RunStatus
from evaluation.run.conversation_score import ConversationEnd, agent_reply, conversation_values
from evaluation.run.plan import PlannedExample
from evaluation.run.simulator import SimulatorFailure, UserSimulator, simulator_seed
from turns.driver import DriveResult
from turns.models import Turn, TurnKind, TurnStatus
from turns.services import turn_create_many

#: The key of a simulated message's turn context that records the simulator's
#: seed and usage (role ``user_simulator``): summed into the prediction's usage.
SIMULATED_CONTEXT_KEY = "simulated_user"


@dataclass(frozen=True)
class NextMessage:
    """What comes after the turns so far: the next user ``text``, or the
    conversation's ``end``; ``context`` extra for the next turn."""

    text: str | None = None
    end: ConversationEnd | None = None
    context: dict[str, Any] | None = None


async def drive_conversation(
    item: PlannedExample,
    *,
    db: DatabaseThreads,
    drive: Callable[[int], Awaitable[DriveResult | None]],
    simulator: UserSimulator | None,
) -> DriveResult | None:
    """Drive ``item``'s conversation to its end and complete its prediction.
    ``drive(turn_id)``: one turn through the driver (``None``: it could not
    be claimed — it has ended). Returns the result of a turn the database
    interrupted (the conversation is left open for the resume), else ``None``."""
    turn_id = item.turn_id
    while True:
        if turn_id:
            result = await drive(turn_id)
            if result is not None and result.status == TurnStatus.INTERRUPTED:
                return result
        turns = await db.run(conversation_turns, conversation_id=item.conversation_id)
        if await db.run(run_cancelled, prediction_id=item.prediction_id):
            step = NextMessage(end=ConversationEnd("cancelled", "the run was cancelled"))
        else:
            step = await _next(item, turns, simulator)
        if step.end is not None:
            await db.run(
                conversation_complete, prediction_id=item.prediction_id, example=item.example, end=step.end
            )
            return None
        assert step.text is not None
        turn_id = await db.run(
            conversation_turn_next,
            item=item,
            question=step.text,
            position=len(turns) + 1,
            context=step.context or {},
        )


async def _next(item: PlannedExample, turns: list[Turn], simulator: UserSimulator | None) -> NextMessage:
    """The next user message after ``turns``, or how the conversation ends."""
    if turns and turns[-1].status == TurnStatus.CANCELLED:
        return NextMessage(end=ConversationEnd("cancelled", f"turn {turns[-1].position} was cancelled"))
    if turns and turns[-1].status != TurnStatus.SUCCEEDED:
        last = turns[-1]
        return NextMessage(end=ConversationEnd("turn_failed", f"turn {last.position} ended {last.status}"))
    metadata = item.example.metadata or {}
    if conversation_kind(metadata) == "turns":
        specs = metadata[TURNS_KEY]
        if len(turns) >= len(specs):
            return NextMessage(end=ConversationEnd("script_done"))
        return NextMessage(text=str(specs[len(turns)]["user"]))
    user = metadata[SIMULATED_KEY]
    if len(turns) >= int(user["max_turns"]):
        return NextMessage(end=ConversationEnd("max_turns"))
    if simulator is None:
        return NextMessage(end=ConversationEnd("simulator_failed", "the run has no user simulator"))
    exchanges = [(turn.question, agent_reply(turn)) for turn in turns]
    try:
        reply = await simulator.next_message(
            user, exchanges, question_id=item.example.external_id, epoch=item.epoch
        )
    except SimulatorFailure as exc:
        return NextMessage(end=ConversationEnd("simulator_failed", str(exc), simulator_usage=exc.usage))
    if reply.text is None:
        return NextMessage(end=ConversationEnd("stop_marker", simulator_usage=reply.usage))
    seed = simulator_seed(simulator.seed, item.example.external_id, item.epoch)
    record = {"seed": seed, "temperature": simulator.temperature, "usage": reply.usage}
    return NextMessage(text=reply.text, context={SIMULATED_CONTEXT_KEY: record})


def run_cancelled(*, prediction_id: int) -> bool:
    """Whether the prediction's run was cancelled (``manage.py cancel_run``):
    its conversations start no new turn."""
    return Prediction.objects.filter(pk=prediction_id, run__status=RunStatus.CANCELLED).exists()


def conversation_turns(*, conversation_id: int | None) -> list[Turn]:
    """The conversation's turns in order (their archived attempts prefetched); none without one."""
    if conversation_id is None:
        return []
    rows = Turn.objects.filter(conversation_id=conversation_id).prefetch_related("attempt_rows")
    return list(rows.order_by("position", "pk"))


def conversation_turn_next(
    *, item: PlannedExample, question: str, position: int, context: dict[str, Any]
) -> int:
    """The conversation's next turn — at ``position``, asking ``question``,
    with ``item.template``'s options and ``context`` added to its tool
    context — and the prediction pointed at it, in one transaction; returns
    the turn's id."""
    assert item.template is not None and item.conversation_id is not None  # run_plan gives both
    prediction = Prediction.objects.select_related("conversation__owner").get(pk=item.prediction_id)
    assert prediction.conversation is not None
    spec = dataclasses.replace(
        item.template,
        question=question,
        context={**item.template.context, **context},
        conversation_id=item.conversation_id,
        position=position,
    )
    with transaction.atomic():
        (turn,) = turn_create_many(
            owner=prediction.conversation.owner, turns=[spec], kind=TurnKind.EVALUATION
        )
        Prediction.objects.filter(pk=item.prediction_id).update(turn=turn)
    return turn.pk


def conversation_complete(*, prediction_id: int, example: Example, end: ConversationEnd) -> None:
    """Complete a conversation example's prediction from its turns
    (``conversation_values``); the simulator usage recorded on its turns
    (``SIMULATED_CONTEXT_KEY``) is added to the ending call's."""
    prediction = Prediction.objects.get(pk=prediction_id)
    turns = conversation_turns(conversation_id=prediction.conversation_id)
    usage = UsageTotals.from_dict(dict(end.simulator_usage or {}))
    for turn in turns:
        recorded = (turn.context or {}).get(SIMULATED_CONTEXT_KEY) or {}
        usage.merge(UsageTotals.from_dict(dict(recorded.get("usage") or {})))
    end = dataclasses.replace(end, simulator_usage=usage.to_dict() if usage.calls else None)
    Prediction.objects.filter(pk=prediction_id).update(
        **conversation_values(example=example, turns=turns, end=end)
    )
