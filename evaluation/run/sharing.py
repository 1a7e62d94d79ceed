"""A concurrency budget shared fairly by several runs driven at once
(``run_experiment``: one run per variant; docs/architecture.md#experiments).

``FairShare(capacity)`` hands out ``capacity`` slots to *lanes* (one per
run). When a slot frees and several lanes wait, it goes to the waiting lane
with the fewest slots held — the lane's earliest waiter first; among lanes
holding as many, the one served longest ago (round robin), so with fewer
slots than lanes every lane takes its turn. So with every lane busy each holds about
``capacity / lanes`` slots; a lane whose calls are slow (a slow endpoint)
keeps its share but cannot take the others' — their examples keep flowing at
their own pace — and a lane with nothing left to do leaves its share to the
rest (the scheduler is work-conserving). This is max-min fair sharing, the
rule of fair queueing (Demers, Keshav and Shenker, "Analysis and Simulation
of a Fair Queueing Algorithm", SIGCOMM 1989) applied to slots instead of
bytes.

Single-threaded: every method runs on the event loop that uses the share.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from types import TracebackType


class FairShare:
    """``capacity`` slots shared max-min fairly by lanes (``lane()``).
    Raises ``ValueError`` for ``capacity < 1``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.free = capacity
        self._lanes: list[Lane] = []
        self._tick = itertools.count()
        self._scheduled = False

    def lane(self) -> Lane:
        """A new lane: ``async with lane:`` holds one slot of the share."""
        lane = Lane(self)
        self._lanes.append(lane)
        return lane

    @property
    def held(self) -> dict[int, int]:
        """Slots held per lane, by lane number (for tests and benchmarks)."""
        return {number: lane.held for number, lane in enumerate(self._lanes)}

    def _dispatch_soon(self) -> None:
        """Dispatch at the loop's next turn, once: the examples of every lane
        that start together (``asyncio.gather``) are all waiting by then, so
        the first lane to arrive does not take the whole budget."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Give free slots to waiters: each to the waiting lane holding fewest."""
        self._scheduled = False
        while self.free > 0:
            waiting = [lane for lane in self._lanes if lane._live_waiter()]
            if not waiting:
                return
            # fewest held first; among equals, the lane served longest ago (round robin)
            lane = min(waiting, key=lambda candidate: (candidate.held, candidate.served))
            _, future = lane._waiters.popleft()
            lane.held += 1
            lane.served = next(self._tick)
            self.free -= 1
            future.set_result(None)

    def _release(self, lane: Lane) -> None:
        lane.held -= 1
        self.free += 1
        self._dispatch()


class Lane:
    """One run's way into a ``FairShare``: an async context manager holding a
    slot while inside; ``held`` is how many of its slots are taken."""

    def __init__(self, share: FairShare) -> None:
        self.share = share
        self.held = 0
        #: when the lane was last given a slot (the share's tick; -1: never)
        self.served = -1
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _live_waiter(self) -> bool:
        """Whether a waiter that is not cancelled heads the queue (dropping cancelled ones)."""
        while self._waiters and self._waiters[0][1].done():
            self._waiters.popleft()
        return bool(self._waiters)

    async def __aenter__(self) -> None:
        share = self.share
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((next(share._tick), future))
        share._dispatch_soon()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                share._release(self)  # granted as it was cancelled: give it back
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.share._release(self)
