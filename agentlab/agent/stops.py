"""Ending an agent run early: cancel, deadline and approval stops, and
awaiting a step's work so that a cancel or the deadline interrupts it.

``LoopStop`` carries a stop reason out of the loop's inner calls to
``AgentLoop.run``, which turns it into a ``LoopResult`` (docs/architecture.md#the-turn-lifecycle).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from agentlab.agent.types import StopReason, ToolCall

T = TypeVar("T")


class LoopStop(Exception):
    """Ends the run early with ``stop_reason`` (cancel, timeout, approval);
    ``error`` is the cause in words, ``pending_call`` the tool call that
    waited for an approval."""

    def __init__(
        self, stop_reason: StopReason, error: str | None = None, pending_call: ToolCall | None = None
    ):
        super().__init__(stop_reason)
        self.stop_reason: StopReason = stop_reason
        self.error = error
        self.pending_call = pending_call


class ReportFailed(Exception):
    """Carries an exception raised by the loop's ``on_report`` past its catch-all."""

    def __init__(self, error: BaseException):
        super().__init__(repr(error))
        self.error = error


def check_stop(cancel: asyncio.Event | None, deadline: float | None) -> None:
    """Raise ``LoopStop("cancelled")`` when ``cancel`` is set, or
    ``LoopStop("timeout")`` when ``deadline`` (a ``time.monotonic()`` value)
    has passed."""
    if cancel is not None and cancel.is_set():
        raise LoopStop("cancelled")
    if deadline is not None and time.monotonic() >= deadline:
        raise LoopStop("timeout", "the turn's deadline passed")


async def guarded(awaitable: Awaitable[T], *, cancel: asyncio.Event | None, deadline: float | None) -> T:
    """Await ``awaitable`` unless ``cancel`` is set or the deadline passes
    first; then cancel it and raise ``LoopStop``. A sync tool running in a
    worker thread cannot be interrupted: it finishes in the background and
    its result is dropped."""
    check_stop(cancel, deadline)
    task: asyncio.Future[T] = asyncio.ensure_future(awaitable)
    if cancel is None and deadline is None:
        return await task
    waiter = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    try:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        pending = {task} | ({waiter} if waiter is not None else set())
        done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        if waiter is not None and waiter in done:
            raise LoopStop("cancelled")
        raise LoopStop("timeout", "the turn's deadline passed")
    finally:
        if waiter is not None and not waiter.done():
            waiter.cancel()
        if not task.done():
            task.cancel()
            # Give the inner call a moment to unwind (close its HTTP
            # request); never wait long — cancel must be prompt.
            await asyncio.wait({task}, timeout=0.5)
        if task.done() and not task.cancelled():
            task.exception()  # mark retrieved: no "exception never retrieved" noise
