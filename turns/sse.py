"""Server-sent events of one turn's event log: ``GET /api/turns/{id}/stream?after=N``
(docs/chat-and-api.md#the-http-api).

For clients without websockets (``curl -N``, ``EventSource``): the same
replay-then-live contract as the websocket (``turns.live.TurnStream``), served
by daphne as an async view streaming a ``text/event-stream``:

- every event as ``id: <seq>`` and ``data: <the event frame as JSON>``
  (``{"seq", "type", "data", "at"}``), so a reconnecting ``EventSource``
  sends ``Last-Event-ID`` and continues exactly; the header wins over
  ``?after=`` (the URL an ``EventSource`` reconnects to still carries it);
- a comment line ``: heartbeat`` every ``HEARTBEAT_S``;
- after the terminal event ``event: stream.end`` with ``data: {"type":
  "stream.end", "status": …}``, then the response ends.

Refusals are JSON in the API's one error shape, before any event: 401 not
logged in, 403 an API key (keys may read runs and predictions only, as on the
turn API), 404 no such turn or not yours (staff see all), 400 a bad
``after``/``Last-Event-ID``.

The view joins the turn's doorbell group on a channel of its own
(``channel_layer.new_channel()``), replays, then feeds each doorbell to the
stream; the heartbeat ticks come from the shared ``StreamTicker``. Frames go
through a bounded queue to the response: a client that reads slowly holds up
only its own stream (a replay waits for it; its missed doorbells are read
from the database later). The ticker never waits for it: this stream's tick
runs as a task of its own, and a tick still running skips the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_GET

from agentlab.telemetry import subscribers_changed
from apikeys.auth import API_KEY_HEADER
from apikeys.services import apikey_authenticate
from common.api import error_body
from turns.doorbell import turn_group
from turns.live import REPLAY_BATCH, TurnStream, parse_after, read_frames, stream_ticker, turn_access

logger = logging.getLogger(__name__)

#: Frames waiting for a slow client, at most.
QUEUE_SIZE = 2 * REPLAY_BATCH
_END = object()


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse(error_body(status, message), status=status)


class SSETransport:
    """``turns.live.StreamTransport`` onto a bounded queue of
    ``text/event-stream`` chunks; a heartbeat is dropped rather than waited
    for when the queue is full (frames are on their way anyway)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUE_SIZE)

    async def send_event(self, frame: dict[str, Any]) -> None:
        data = json.dumps(frame, separators=(",", ":"))
        await self.queue.put(f"id: {frame['seq']}\ndata: {data}\n\n")

    async def send_heartbeat(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(": heartbeat\n\n")

    async def send_end(self, status: str) -> None:
        data = json.dumps({"type": "stream.end", "status": status})
        await self.queue.put(f"event: stream.end\ndata: {data}\n\n")
        await self.queue.put(_END)


class _Ticks:
    """What the ``StreamTicker`` serves for one SSE stream: each tick runs as
    a task, so a client that reads slowly cannot hold the ticker up."""

    def __init__(self, stream: TurnStream) -> None:
        self.turn_id = stream.turn_id
        self.stream = stream
        self.task: asyncio.Task[None] | None = None

    async def _tick(self, last_seq: int | None) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.stream.tick(last_seq))

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def _pump(
    stream: TurnStream, ticks: _Ticks, layer: Any, channel: str, *, status: str, last_seq: int
) -> None:
    """Replay, then feed the doorbells of ``channel`` to ``stream`` until it ends."""
    await stream.start(status=status, last_seq=last_seq)
    if stream.ended:
        return
    stream_ticker().add(ticks)
    while not stream.ended:
        message = await layer.receive(channel)
        if message.get("type") == "turn.doorbell":
            await stream.doorbell(message)


async def _frames(turn_id: int, after: int, *, status: str, last_seq: int) -> AsyncIterator[str]:
    layer = get_channel_layer()
    group = turn_group(turn_id)
    channel = await layer.new_channel()
    transport = SSETransport()
    stream = TurnStream(turn_id=turn_id, after=after, transport=transport, read=read_frames)
    subscribers_changed("sse", 1)
    ticks = _Ticks(stream)
    # Join before reading (turns.live): a doorbell rung after the replay's
    # read is queued on our channel, and whatever it repeats is dropped by seq.
    await layer.group_add(group, channel)
    pump = asyncio.get_running_loop().create_task(
        _pump(stream, ticks, layer, channel, status=status, last_seq=last_seq), name=f"turn-{turn_id}-sse"
    )
    getter: asyncio.Future[Any] | None = None
    try:
        yield ": stream of turn %d after seq %d\n\n" % (turn_id, after)  # noqa: UP031 - the first bytes go out now
        while True:
            getter = asyncio.ensure_future(transport.queue.get())
            done, _ = await asyncio.wait({getter, pump}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                if pump.exception() is not None:  # a read failed for good: end, the client resumes
                    logger.warning("turn %s stream: ended by an error", turn_id, exc_info=pump.exception())
                    return
                continue  # the pump is done but frames may still be queued
            item = getter.result()
            if item is _END:
                return
            yield item
    finally:
        if getter is not None:
            getter.cancel()  # a client that left mid-wait: the read must not outlive the stream
        stream.stop()
        subscribers_changed("sse", -1)
        stream_ticker().discard(ticks)
        ticks.cancel()
        pump.cancel()
        with contextlib.suppress(BaseException):
            await pump
        with contextlib.suppress(Exception):  # best effort: the group entry expires anyway
            await layer.group_discard(group, channel)


@require_GET
async def turn_stream(request: HttpRequest, turn_id: int) -> HttpResponseBase:
    """``GET /api/turns/{turn_id}/stream?after=N`` (module docstring)."""
    user = await request.auser()
    if not user.is_authenticated:
        key = request.headers.get(API_KEY_HEADER)
        if key and await sync_to_async(apikey_authenticate)(raw=key) is not None:
            return _error(403, "API keys may read runs and predictions only")
        return _error(401, "log in to watch a turn")
    after = parse_after(request.headers.get("Last-Event-ID") or request.GET.get("after"))
    if after is None:
        return _error(400, "after (or Last-Event-ID) must be an integer >= 0 in ASCII digits")
    access = await turn_access(turn_id) if 0 < turn_id < 2**63 else None
    if access is None or (access[0] != user.pk and not user.is_staff):
        return _error(404, f"turn {turn_id} not found")
    _, status, last_seq = access
    response = StreamingHttpResponse(
        _frames(turn_id, after, status=status, last_seq=last_seq), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not buffer the stream
    return response
