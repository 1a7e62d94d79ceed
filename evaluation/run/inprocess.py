"""Drive a run's examples through the shared turn driver, with bounded concurrency.

This is the asyncio side of ``run_eval``: every planned example is one turn,
driven by ``turns.driver.drive_turn`` under the evaluation policy, then its
prediction is completed — always, even when the driver raises (the seed batch
runner's "a prediction row is always written" rule).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads, is_connection_error
from evaluation.run.conversation_drive import conversation_complete, drive_conversation
from evaluation.run.conversation_score import ConversationEnd
from evaluation.run.exits import DatabaseOutage
from evaluation.run.extensions import example_subject
from evaluation.run.plan import PlannedExample
from evaluation.run.record import TurnFinal, prediction_complete, prediction_record
from evaluation.run.simulator import UserSimulator
from turns.driver import DriveResult, EvaluationPolicy, drive_turn
from turns.driver.extensions import Subject
from turns.jobs.ids import local_job_id
from turns.models import TurnStatus

logger = logging.getLogger(__name__)


def _no_finish(*, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
    """A conversation's turn completes nothing when it ends: the example's
    prediction is completed once the whole conversation has."""


def _local_eval_job(number: int) -> str:
    return local_job_id("eval", number)


async def drive_examples(
    planned: Sequence[PlannedExample],
    *,
    provider: LLMProvider,
    db: DatabaseThreads,
    concurrency: int,
    on_done: Callable[[PlannedExample], None] | None = None,
    review: bool = True,
    tools: ToolRegistry | None = None,
    extensions: RunExtensions | None = None,
    run_id: str | None = None,
    dataset: str | None = None,
    job_id: Callable[[int], str] | None = None,
    record_unclaimed: bool = True,
    gate: AbstractAsyncContextManager[Any] | None = None,
    on_start: Callable[[PlannedExample], None] | None = None,
    simulator: UserSimulator | None = None,
) -> None:
    """Drive every planned example, at most ``concurrency`` at once.

    ``on_done`` is called (in the event loop) after each prediction is stored —
    the progress bar hangs off it — and ``on_start`` when an example gets its
    slot. ``review`` runs the review phase (one more
    LLM call per answered example, waited for); ``tools`` replaces the
    built-in tools. ``extensions``: the run's plugins and MCP servers
    (``None``: the settings' only); plugins are told the example, ``run_id``
    and ``dataset``. ``job_id(n)``: the claim's job id of the n-th turn
    (default ``local_job_id("eval", n)``). ``record_unclaimed``: complete the
    prediction of a turn that could not be claimed from its row (``run_eval``
    in process: such a turn has ended); ``False`` on a Celery worker, where
    it may be running under another delivery — the following ``run_eval``
    records what ends outside the policy. ``gate``: what an example holds
    while driven (a ``FairShare`` lane when several runs share a budget;
    ``None``: a semaphore of ``concurrency``). A conversation example
    (``PlannedExample.conversation_id``) is driven turn after turn
    (``evaluation.run.conversation_drive``), its user messages written by
    ``simulator`` when it is a simulated user's. Raises ``ValueError`` for ``concurrency < 1``, and
    ``DatabaseOutage`` once every started example is done when the database
    failed under one of them (nothing more is started after that; what it
    hit stays resumable).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    driver = _ExampleDriver(
        provider=provider,
        db=db,
        gate=gate if gate is not None else asyncio.Semaphore(concurrency),
        on_done=on_done,
        on_start=on_start,
        review=review,
        tools=tools,
        extensions=extensions
        or RunExtensions(
            settings_plugins=tuple(settings.AGENTLAB_PLUGINS),
            mcp_servers=tuple(settings.AGENTLAB_MCP_SERVERS),
        ),
        run_id=run_id,
        dataset=dataset,
        job_id=job_id or _local_eval_job,
        record_unclaimed=record_unclaimed,
        simulator=simulator,
    )
    await asyncio.gather(*(driver.one(item) for item in planned))
    if driver.outage:
        raise DatabaseOutage.of(driver.outage[0])


@dataclass
class _ExampleDriver:
    """``drive_examples``' settings and the outage it met: drives one
    planned example at a time under the concurrency ``gate``."""

    provider: LLMProvider
    db: DatabaseThreads
    gate: AbstractAsyncContextManager[Any]
    on_done: Callable[[PlannedExample], None] | None
    on_start: Callable[[PlannedExample], None] | None
    review: bool
    tools: ToolRegistry | None
    extensions: RunExtensions
    run_id: str | None
    dataset: str | None
    job_id: Callable[[int], str]
    record_unclaimed: bool
    simulator: UserSimulator | None = None
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    outage: list[BaseException] = field(default_factory=list)

    async def one(self, item: PlannedExample) -> None:
        """Drive ``item`` when the gate lets it, unless the database failed
        under an earlier example (then it stays planned: the resume drives it)."""
        async with self.gate:
            if self.outage:
                return  # left planned: the resume drives it
            if self.on_start is not None:
                self.on_start(item)
            try:
                await self.drive(item)
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                logger.warning("example %s: the database failed: %s", item.example_id, exc)
                self.outage.append(exc)

    async def drive(self, item: PlannedExample) -> None:
        """Drive ``item``'s turn and make sure its prediction is complete."""
        if item.conversation_id is not None:
            await self.converse(item)
            return
        recorded = False

        def finish(*, turn_id: int, turn_fields: Mapping[str, Any]) -> None:
            # in the terminal event's transaction: one UPDATE, no read-back
            nonlocal recorded
            prediction_complete(
                prediction_id=item.prediction_id,
                example=item.example,
                turn=TurnFinal.from_fields(turn_fields, turn_id=turn_id),
            )
            recorded = True

        error: str | None = None
        result = None
        try:
            result = await self.turn(item, finish)
        except Exception as exc:
            if is_connection_error(exc):
                raise
            logger.exception("example %s: turn %s raised", item.example_id, item.turn_id)
            error = f"{type(exc).__name__}: {exc}"
        else:
            if result is not None and result.status == TurnStatus.INTERRUPTED:
                # the database failed under the turn: it is interrupted,
                # and its prediction stays open for the resume
                self.outage.append(DatabaseOutage.of(result.error or "a turn was interrupted"))
                return
        if error is None and result is None and not self.record_unclaimed:
            return  # another delivery drives it (or did): nothing of ours to record
        if not recorded:
            # not claimable (already ended) or the finish itself failed:
            # complete the row from what the turn row says now
            await self.db.run(prediction_record, prediction_id=item.prediction_id, error=error)
        if self.on_done is not None:
            self.on_done(item)

    async def converse(self, item: PlannedExample) -> None:
        """Drive a conversation example's turns one after another
        (``drive_conversation``) and complete its prediction; an exception
        other than the database's ends the conversation with it recorded."""

        async def one_turn(turn_id: int) -> DriveResult | None:
            return await self.turn(dataclasses.replace(item, turn_id=turn_id), _no_finish)

        try:
            interrupted = await drive_conversation(item, db=self.db, drive=one_turn, simulator=self.simulator)
        except Exception as exc:
            if is_connection_error(exc):
                raise
            logger.exception("example %s: conversation %s raised", item.example_id, item.conversation_id)
            end = ConversationEnd("turn_failed", f"{type(exc).__name__}: {exc}")
            await self.db.run(
                conversation_complete, prediction_id=item.prediction_id, example=item.example, end=end
            )
            interrupted = None
        if interrupted is not None:
            self.outage.append(DatabaseOutage.of(interrupted.error or "a turn was interrupted"))
            return
        if self.on_done is not None:
            self.on_done(item)

    async def turn(self, item: PlannedExample, finish: Callable[..., None]) -> DriveResult | None:
        """``drive_turn`` for ``item`` under the evaluation policy."""
        # a job id that names this process: another run_eval can tell
        # whether the turn's driver is still alive (run_plan)
        return await drive_turn(
            item.turn_id,
            policy=EvaluationPolicy(finish=finish, review=self.review),
            provider=self.provider,
            db=self.db,
            tools=self.tools,
            job_id=self.job_id(next(self.numbers)),
            extensions=self.extensions.for_example(item.example.plugins or ()),
            subject=Subject(example=example_subject(item.example), run_id=self.run_id, dataset=self.dataset),
        )
