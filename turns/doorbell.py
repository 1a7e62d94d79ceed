"""The doorbell: ring a turn's channel-layer group after its events commit
(docs/architecture.md#the-event-log).

The channel layer is only a doorbell, never the log: a lost ring delays
nothing a subscriber cannot recover from the database on its next heartbeat
tick, so ringing is best effort and never raises.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)


def turn_group(turn_id: int) -> str:
    """The channel-layer group a turn's doorbell rings in."""
    return f"turn.{turn_id}"


class _Doorbell:
    """Delivers rings on one long-lived event loop, without blocking the writer.

    ``async_to_sync`` per ring would build an event loop for every append and
    wait for the channel layer — in a profile of ``run_eval`` that was most of
    the database threads' time. Rings are instead handed to a loop and not
    awaited: the doorbell is best effort, and subscribers read gaps by seq.

    Rings for the same turn that arrive before its previous ring was sent are
    coalesced into one doorbell carrying all their frames, so a burst of
    appends costs a few ``group_send`` calls, not one per event (a burst of
    500 used to exhaust channels_redis's connection pool).

    The loop is a daemon thread started on first use, unless a server adopts
    its own running loop with ``set_loop`` (daphne with the in-memory channel
    layer must, because that layer's queues belong to the server's loop).
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._adopted = False
        self._lock = threading.Lock()
        #: frames waiting to be sent, per turn; only touched on the loop
        self._pending: dict[int, list[dict[str, Any]]] = {}

    def set_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._loop = loop
            self._adopted = True

    def _nobody_can_listen(self) -> bool:
        """With the in-memory layer, only consumers of this process on an
        adopted loop can hear a ring; a process that adopted none
        (``run_eval``, a Celery worker without Redis) rings for nobody, and
        skipping that saves a thread wake-up per append."""
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        return not self._adopted and isinstance(get_channel_layer(), InMemoryChannelLayer)

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="agentlab-doorbell", daemon=True).start()
                self._loop = loop
            return self._loop

    def ring(self, turn_id: int, frames: list[dict[str, Any]]) -> None:
        if self._nobody_can_listen():
            return
        loop = self._get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._add(turn_id, frames)
        else:
            loop.call_soon_threadsafe(self._add, turn_id, frames)

    def _add(self, turn_id: int, frames: list[dict[str, Any]]) -> None:
        pending = self._pending.get(turn_id)
        if pending is not None:
            pending.extend(frames)
            return
        self._pending[turn_id] = list(frames)
        asyncio.get_running_loop().create_task(self._send(turn_id))

    async def _send(self, turn_id: int) -> None:
        frames = self._pending.pop(turn_id)
        await _group_send(turn_id, {"type": "turn.doorbell", "events": frames})


async def _group_send(turn_id: int, message: dict[str, Any]) -> None:
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
        if layer is not None:
            await layer.group_send(turn_group(turn_id), message)
    except Exception:
        logger.warning("doorbell for turn %s was not delivered", turn_id, exc_info=True)


doorbell = _Doorbell()


def ring_turn(turn_id: int, frames: Iterable[dict[str, Any]]) -> None:
    """Ring the doorbell of a turn's group, carrying the new event frames.

    Best effort by design (docs/architecture.md#the-event-log): returns at once; a full channel, a
    missing layer or a broken connection is logged and swallowed — subscribers
    read the gap from the database on their next tick. Never raises.
    """
    try:
        doorbell.ring(turn_id, list(frames))
    except Exception:
        logger.warning("doorbell for turn %s could not be rung", turn_id, exc_info=True)
