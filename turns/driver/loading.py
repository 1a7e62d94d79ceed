"""Loading the model before a turn's first step, shown in the log
(docs/architecture.md#the-turn-lifecycle)."""

from __future__ import annotations

import asyncio
import logging

from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads

# called through the module, so that a test can break every write of the driver at once
from turns import events as event_log
from turns.event_types import PhaseData
from turns.events import NewEvent
from turns.models import EventType, TurnPhase

logger = logging.getLogger(__name__)


async def model_load(provider: LLMProvider, *, turn_id: int, holder: str, db: DatabaseThreads) -> None:
    """Load ``provider``'s model when it is not in memory yet (its ``ready``
    is false: the embedded model, on its first turn in this process, before
    the start-up preload is done), with phase ``load`` in the turn's log
    meanwhile — a turn shows that it is loading, not a silent ``act`` — then
    phase ``act`` again. A provider without ``ready`` (an endpoint) does
    nothing. A model that cannot load is left to the first LLM call to report."""
    if getattr(provider, "ready", True):
        return
    await _phase(TurnPhase.LOAD, turn_id=turn_id, holder=holder, db=db)
    try:
        await asyncio.to_thread(provider.load)  # type: ignore[attr-defined]
    except Exception:
        logger.warning("turn %s: the model could not be loaded", turn_id, exc_info=True)
    await _phase(TurnPhase.ACT, turn_id=turn_id, holder=holder, db=db)


async def _phase(phase: str, *, turn_id: int, holder: str, db: DatabaseThreads) -> None:
    await db.run(
        event_log.event_append_many,
        turn_id=turn_id,
        events=[NewEvent(EventType.PHASE, PhaseData(phase=phase))],
        turn_fields={"phase": phase},
        holder=holder,
    )
