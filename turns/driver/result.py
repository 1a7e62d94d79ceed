"""What a driven turn ended with (``DriveResult``), and the ends the driver
writes when a turn cannot finish normally: the database failed under it
(``finish_after_outage``: interrupted, resumable) or the driver itself raised
(``finish_after_error``: failed, the error recorded).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from common.db import DatabaseThreads, is_connection_error
from turns.driver.finish import finish_interrupted, finish_unexpected
from turns.driver.policies import TurnPolicy
from turns.driver.recorder import Recorder
from turns.events import TurnNotHeld
from turns.models import Turn, TurnOutcome, TurnStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DriveResult:
    """What a driven turn ended with (the same values are on the turn row)."""

    turn_id: int
    status: str
    outcome: str
    stop_reason: str
    answer: str
    evidence: str
    reasoning: str
    steps: int
    usage: dict[str, Any]
    error: str | None
    latency_ms: int

    @classmethod
    def errored(
        cls, *, turn_id: int, status: str, outcome: str, recorder: Recorder, error: str, latency_ms: int
    ) -> DriveResult:
        """The result of a turn the driver could not finish (it raised, or
        the database failed under it): stop reason ``error``, no answer, the
        steps and usage ``recorder`` had."""
        return cls(
            turn_id=turn_id,
            status=status,
            outcome=outcome,
            stop_reason="error",
            answer="",
            evidence="",
            reasoning="",
            steps=recorder.steps,
            usage=recorder.usage.to_dict(),
            error=error,
            latency_ms=latency_ms,
        )


async def finish_after_error(
    exc: Exception,
    *,
    turn_id: int,
    holder: str,
    recorder: Recorder,
    db: DatabaseThreads,
    timings: dict[str, int],
    meta: dict[str, Any],
    policy: TurnPolicy,
) -> DriveResult:
    """End a turn whose driver raised ``exc``: a database outage interrupts
    it (``finish_after_outage``); a turn swept and resumed elsewhere, or
    deleted with its conversation, is logged and left alone; anything else
    fails it with the error recorded (``finish_unexpected``), best effort.
    ``timings`` already holds ``total_ms``."""
    if is_connection_error(exc):
        return await finish_after_outage(
            exc, turn_id=turn_id, holder=holder, recorder=recorder, db=db, timings=timings
        )
    if isinstance(exc, TurnNotHeld | Turn.DoesNotExist):
        # swept and resumed elsewhere, or deleted with its conversation:
        # not a failure of this turn, and nothing more to write
        logger.warning("turn %s: driver stopped: %s", turn_id, exc)
    else:
        logger.exception("turn %s: driver failed", turn_id)
    error = f"{type(exc).__name__}: {exc}"
    try:
        await db.run(
            finish_unexpected,
            turn_id=turn_id,
            error=error,
            usage=recorder.usage.to_dict(),
            steps=recorder.steps,
            timings=timings,
            meta=meta,
            pending=recorder.pending,
            pending_fields=recorder.pending_fields,
            policy=policy,
            holder=holder,
        )
    except Exception:
        logger.exception("turn %s: could not record the failure", turn_id)
    return DriveResult.errored(
        turn_id=turn_id,
        status=TurnStatus.FAILED,
        outcome=TurnOutcome.FAILED,
        recorder=recorder,
        error=error,
        latency_ms=timings["total_ms"],
    )


#: How often, and how far apart (seconds), a driver that lost the database
#: tries to mark its turn interrupted before leaving that to the sweeper.
OUTAGE_WRITE_TRIES = 3
OUTAGE_WRITE_PAUSE_S = 1.0


async def finish_after_outage(
    exc: Exception,
    *,
    turn_id: int,
    holder: str,
    recorder: Recorder,
    db: DatabaseThreads,
    timings: dict[str, int],
) -> DriveResult:
    """The database failed under the turn (a restart, a network cut): end it
    ``interrupted`` — resumable, with the steps it had held back — not
    failed (``finish_interrupted``). The database may still be down: a few
    tries, then the turn stays ``running`` for the sweeper to mark
    interrupted once its heartbeat is stale. Either way it resumes."""
    error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    logger.warning("turn %s: the database failed under it; interrupting: %s", turn_id, error)
    for attempt in range(OUTAGE_WRITE_TRIES):
        if attempt:
            await asyncio.sleep(OUTAGE_WRITE_PAUSE_S)
        try:
            await db.run(
                finish_interrupted,
                reason=f"database error: {error}"[:500],
                turn_id=turn_id,
                usage=recorder.usage.to_dict(),
                steps=recorder.steps,
                timings=timings,
                pending=recorder.pending,
                pending_fields=recorder.pending_fields,
                holder=holder,
            )
            break
        except Exception as again:
            if not is_connection_error(again):
                logger.exception("turn %s: could not record the interruption", turn_id)
                break
    return DriveResult.errored(
        turn_id=turn_id,
        status=TurnStatus.INTERRUPTED,
        outcome="",
        recorder=recorder,
        error=error,
        latency_ms=timings.get("total_ms", 0),
    )
