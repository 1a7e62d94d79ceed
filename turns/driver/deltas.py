"""Coalescing a streaming completion's text into ``llm.delta`` events (docs/architecture.md#the-event-log).

The agent loop hands the visible text of a streaming reply over in small
pieces (``agentlab.agent.streaming.TextDelta``, often one token each). Each
event is a transaction and a doorbell, so the driver writes the text that
arrived since the last write at most every ``DELTA_INTERVAL_S`` per turn —
about 10 events a second — and at most ``DELTA_MAX_EVENTS`` times per
completion: past ``DELTA_SLOW_AFTER`` events the interval grows to
``DELTA_SLOW_INTERVAL_S``, and once the bound is reached what remains waits
for the completion's own write. What is still buffered when the completion
arrives is written in the same transaction as the step's events
(``Recorder``), before them, so the log reads text-then-record and a
reconnecting client resumes mid-answer exactly where it left off.

Only the chat policy streams (``TurnPolicy.streams``): an evaluation turn has
nobody watching, and its throughput is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from agentlab.agent.streaming import TextDelta
from turns.event_types import LLMDeltaData
from turns.events import NewEvent
from turns.models import EventType

logger = logging.getLogger(__name__)

#: Seconds between two ``llm.delta`` writes of one turn (about 10 a second).
DELTA_INTERVAL_S = 0.1
#: After this many events of one completion, write every ``DELTA_SLOW_INTERVAL_S``.
DELTA_SLOW_AFTER = 100
DELTA_SLOW_INTERVAL_S = 0.5
#: The most ``llm.delta`` events one completion writes, its last write included.
DELTA_MAX_EVENTS = 200

Write = Callable[[Sequence[NewEvent]], Awaitable[None]]


class DeltaCoalescer:
    """Buffers one attempt's streamed text and writes it as ``llm.delta`` events.

    Call it (synchronously, on the driver's event loop) with each
    ``TextDelta``; a timer task writes the buffer through ``write`` (an async
    callable taking the events) when ``interval_s`` has passed since the
    last write. ``drain()`` — awaited by the recorder before it writes a
    step's completion — stops the timer, waits for a write in flight, and
    returns the unwritten rest as events for the recorder's own transaction.

    A write that fails (the turn was taken over, the database went away) is
    logged and ends streaming for this attempt: the completion is the record,
    the deltas only show it growing. ``events`` counts the events made.
    """

    def __init__(
        self,
        *,
        attempt: int,
        write: Write,
        interval_s: float = DELTA_INTERVAL_S,
        slow_after: int = DELTA_SLOW_AFTER,
        slow_interval_s: float = DELTA_SLOW_INTERVAL_S,
        max_events: int = DELTA_MAX_EVENTS,
    ) -> None:
        self.attempt = attempt
        self._write = write
        self.interval_s = interval_s
        self.slow_after = slow_after
        self.slow_interval_s = slow_interval_s
        self.max_events = max(1, max_events)
        self.events = 0
        self._key: tuple[int, int] | None = None  # (step, completion) being streamed
        self._written = 0  # characters of the key's text already in events
        self._count = 0  # events of the key so far
        self._buffer: list[str] = []
        self._last_write = 0.0
        self._timer: asyncio.Task[None] | None = None
        self._writing = False
        self._lock = asyncio.Lock()
        self._broken = False

    def __call__(self, delta: TextDelta) -> None:
        if self._broken or not delta.text:
            return
        key = (delta.step, delta.completion)
        if key != self._key:
            # a new completion (the next step, or a retry after a cut
            # stream): an earlier try's unwritten text is of no use any more
            self._key, self._written, self._count, self._buffer = key, 0, 0, []
        self._buffer.append(delta.text)
        if self._timer is None and self._count < self.max_events - 1:
            loop = asyncio.get_running_loop()
            interval = self.slow_interval_s if self._count >= self.slow_after else self.interval_s
            wait = max(0.0, self._last_write + interval - loop.time())
            self._timer = loop.create_task(self._flush_after(wait), name="turn-delta-flush")

    def _take(self) -> list[NewEvent]:
        if not self._buffer or self._key is None:
            return []
        text = "".join(self._buffer)
        self._buffer = []
        step, completion = self._key
        data = LLMDeltaData(
            attempt=self.attempt, step=step, completion=completion, offset=self._written, text=text
        )
        self._written += len(text)
        self._count += 1
        self.events += 1
        return [NewEvent(EventType.LLM_DELTA, data)]

    async def _flush_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        async with self._lock:
            self._writing = True
            try:
                events = self._take()
                if events:
                    await self._write(events)
            except Exception:
                logger.warning(
                    "attempt %s: writing streamed text failed; not streaming further",
                    self.attempt,
                    exc_info=True,
                )
                self._broken = True
            finally:
                self._writing = False
                self._timer = None
                self._last_write = asyncio.get_running_loop().time()

    async def drain(self) -> list[NewEvent]:
        """The unwritten text as events (``[]`` for none), after any write in
        flight; no timer is left running."""
        timer = self._timer
        if timer is not None and not self._writing:
            timer.cancel()
            self._timer = None
        async with self._lock:
            if self._broken:
                return []
            return self._take()

    async def close(self) -> None:
        """Stop the timer without writing (the attempt is over)."""
        self._broken = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            # its failure was logged; being cancelled is expected
            with contextlib.suppress(BaseException):
                await timer
