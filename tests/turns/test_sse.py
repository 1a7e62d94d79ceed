"""Server-sent events of a turn (``GET /api/turns/{id}/stream``) through the
real ASGI application against the real database: the same replay-then-live
contract as the websocket (``turns.live``), ``Last-Event-ID``, heartbeats,
``stream.end``, ownership; and reconnecting mid-answer over both transports."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.db import connections

from agentlab.agent.providers.scripted import ScriptedProvider, Slow, final, text, tool_call
from turns.driver import CHAT, drive_turn
from turns.events import event_append
from turns.selectors import events_after
from turns.services import turn_create

from .conftest import ws_app
from .test_consumers import connect, read_events, read_until_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("stream_settings")]


@pytest.fixture(autouse=True)
async def _doorbell_on_this_loop():
    from turns.doorbell import doorbell

    doorbell.set_loop(asyncio.get_running_loop())
    yield


@pytest.fixture
async def login(client):
    """``await login(user)`` → the session cookie header of ``user``."""

    async def log_in(user) -> tuple[bytes, bytes]:
        await sync_to_async(client.force_login)(user)
        return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())

    yield log_in
    # force_login ran on asgiref's sync thread: close its connection there
    await sync_to_async(connections.close_all, thread_sensitive=True)()


class SSE:
    """One ``text/event-stream`` response read event by event."""

    def __init__(self, communicator: ApplicationCommunicator, start: dict[str, Any]) -> None:
        self.communicator = communicator
        self.status = start["status"]
        self.headers = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
        self.buffer = ""
        self.closed = False

    async def _more(self, timeout: float) -> None:
        message = await self.communicator.receive_output(timeout=timeout)
        assert message["type"] == "http.response.body"
        self.buffer += message.get("body", b"").decode()
        if not message.get("more_body", False):
            self.closed = True

    async def next(self, timeout: float = 5) -> dict[str, Any] | None:
        """The next event or comment as ``{"id", "event", "data", "comment"}``;
        ``None`` once the response has ended."""
        while "\n\n" not in self.buffer:
            if self.closed:
                return None
            await self._more(timeout)
        block, self.buffer = self.buffer.split("\n\n", 1)
        item: dict[str, Any] = {}
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "":
                item["comment"] = value
            elif field == "data":
                item["data"] = json.loads(value)
            else:
                item[field] = value
        return item

    async def events_until_end(self, timeout: float = 10) -> tuple[list[dict], dict, int]:
        """(event frames, the stream.end data, heartbeats seen) — then the response must end."""
        frames: list[dict] = []
        heartbeats = 0
        while True:
            item = await self.next(timeout)
            assert item is not None, "the response ended without stream.end"
            if item.get("comment") == "heartbeat":
                heartbeats += 1
            elif item.get("event") == "stream.end":
                assert await self.next(timeout) is None  # and then the response ends
                return frames, item["data"], heartbeats
            elif "data" in item:
                assert item["id"] == str(item["data"]["seq"])  # id: is the seq, on every event
                frames.append(item["data"])


async def open_sse(turn_id: int, *headers: tuple[bytes, bytes], query: str = "") -> SSE:
    from config.asgi import django_asgi_app

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/api/turns/{turn_id}/stream",
        "raw_path": f"/api/turns/{turn_id}/stream".encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"localhost"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    communicator = ApplicationCommunicator(django_asgi_app, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(timeout=10)
    assert start["type"] == "http.response.start"
    return SSE(communicator, start)


async def error_of(sse: SSE) -> dict[str, Any]:
    while not sse.closed:
        await sse._more(5)
    return json.loads(sse.buffer)


def db_frames(turn_id: int) -> list[dict]:
    return [e.as_frame() for e in events_after(turn_id=turn_id)]


def streaming_script():
    return [
        Slow(0.2, tool_call("calculator", {"expression": "6*7"}, content="I will multiply.")),
        text("The answer is **42**, computed with the calculator tool in one step."),
    ]


async def test_replay_then_live_with_ids_heartbeats_and_stream_end(owner, db_threads, login):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    sse = await open_sse(turn.pk, await login(owner))
    assert sse.status == 200 and sse.headers["content-type"].startswith("text/event-stream")
    assert sse.headers["cache-control"] == "no-cache"

    await asyncio.sleep(0.5)  # heartbeats (every 0.2 s) while nothing happens
    provider = ScriptedProvider(streaming_script(), stream_chars=4, stream_delay=0.01)
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    frames, end, heartbeats = await sse.events_until_end()

    assert frames == await db_threads.run(db_frames, turn.pk)
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert "llm.delta" in {f["type"] for f in frames}
    assert end == {"type": "stream.end", "status": "succeeded"}
    assert heartbeats >= 1


async def test_last_event_id_continues_exactly_and_wins_over_after(owner, db_threads, login):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    await drive_turn(turn.pk, policy=CHAT, provider=ScriptedProvider([final("1")]), db=db_threads)
    everything = await db_threads.run(db_frames, turn.pk)
    cookie = await login(owner)

    sse = await open_sse(turn.pk, cookie, (b"last-event-id", b"2"), query="after=0")
    frames, end, _ = await sse.events_until_end()
    assert frames == everything[2:] and end["status"] == "succeeded"

    sse = await open_sse(turn.pk, cookie, query=f"after={len(everything) - 1}")
    frames, _, _ = await sse.events_until_end()
    assert frames == everything[-1:]

    # a client that has it all (saw the terminal event, not the end) just gets the end
    sse = await open_sse(turn.pk, cookie, (b"last-event-id", str(len(everything)).encode()))
    assert await sse.events_until_end() == ([], {"type": "stream.end", "status": "succeeded"}, 0)


async def test_refusals_are_json_errors_in_the_one_shape(owner, outsider, staff, db_threads, login):
    turn = await db_threads.run(turn_create, owner=owner, question="q")

    anonymous = await open_sse(turn.pk)
    assert anonymous.status == 401
    assert (await error_of(anonymous))["error"]["code"] == "unauthenticated"

    theirs = await open_sse(turn.pk, await login(outsider))
    assert theirs.status == 404 and (await error_of(theirs))["error"]["code"] == "not_found"

    missing = await open_sse(turn.pk + 1000, await login(owner))
    assert missing.status == 404

    bad = await open_sse(turn.pk, await login(owner), (b"last-event-id", b"-3"))
    assert bad.status == 400 and "after" in (await error_of(bad))["error"]["message"]

    watched = await open_sse(turn.pk, await login(staff))  # staff see all
    assert watched.status == 200
    first = await watched.next()
    assert first is not None and "comment" in first
    first = await watched.next()
    assert first is not None and first["data"]["type"] == "turn.queued"
    await watched.communicator.send_input({"type": "http.disconnect"})
    await watched.communicator.wait(timeout=5)


async def test_an_event_appended_while_streaming_arrives_once(owner, db_threads, login):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    sse = await open_sse(turn.pk, await login(owner))
    await sse.next()  # the opening comment
    first = await sse.next()
    assert first is not None and first["data"]["seq"] == 1
    await db_threads.run(event_append, turn_id=turn.pk, type="thinking", data={"text": "live"})
    item = await sse.next()
    while item is not None and item.get("comment") == "heartbeat":
        item = await sse.next()
    assert item is not None and item["id"] == "2" and item["data"]["data"] == {"text": "live"}
    await sse.communicator.send_input({"type": "http.disconnect"})
    await sse.communicator.wait(timeout=5)


async def test_a_slow_client_gets_a_long_log_whole_and_holds_up_no_one(owner, db_threads, login, monkeypatch):
    from turns import sse

    monkeypatch.setattr(sse, "QUEUE_SIZE", 3)
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    for i in range(20):  # far more than the queue holds
        await db_threads.run(event_append, turn_id=turn.pk, type="thinking", data={"text": str(i)})
    other = await db_threads.run(turn_create, owner=owner, question="r")
    cookie = await login(owner)
    slow = await open_sse(turn.pk, cookie)
    await asyncio.sleep(0.6)  # it reads nothing while heartbeats are due (every 0.2 s)

    quick = await open_sse(other.pk, cookie)  # another stream is not held up by it
    heartbeats = 0
    while heartbeats < 2:
        item = await quick.next(timeout=2)
        assert item is not None
        heartbeats += item.get("comment") == "heartbeat"

    frames: list[dict] = []
    while len(frames) < 21:
        item = await slow.next()
        assert item is not None and item.get("event") != "stream.end"
        if "data" in item:
            frames.append(item["data"])
    assert [f["seq"] for f in frames] == list(range(1, 22))
    for stream in (slow, quick):
        await stream.communicator.send_input({"type": "http.disconnect"})
        await stream.communicator.wait(timeout=5)


def answer_text(frames: list[dict], step: int) -> str:
    """The visible text of ``step``'s latest completion, rebuilt from its
    ``llm.delta`` frames as the chat page does (offset says where each goes)."""
    deltas = [f["data"] for f in frames if f["type"] == "llm.delta" and f["data"]["step"] == step]
    last = max(d["completion"] for d in deltas)
    text = ""
    for d in deltas:
        if d["completion"] == last:
            assert d["offset"] == len(text)  # no gap, no overlap
            text += d["text"]
    return text


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_reconnect_mid_answer_resumes_with_no_gap_and_no_duplicate(owner, db_threads, login, transport):
    answer = "The answer is **42**. " * 12
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([text(answer)], stream_chars=3, stream_delay=0.01)
    driving = asyncio.create_task(drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads))

    async def first_part() -> list[dict]:
        frames: list[dict] = []
        if transport == "websocket":
            ws = await connect(ws_app(owner), turn.pk)
            while not any(f["type"] == "llm.delta" for f in frames[-1:]) or len(frames) < 5:
                frames += await read_events(ws, 1)
            await ws.disconnect()
            return frames
        sse = await open_sse(turn.pk, await login(owner))
        while len(frames) < 5 or frames[-1]["type"] != "llm.delta":
            item = await sse.next()
            if item and "data" in item:
                frames.append(item["data"])
        await sse.communicator.send_input({"type": "http.disconnect"})
        await sse.communicator.wait(timeout=5)
        return frames

    head = await first_part()
    mid = head[-1]["seq"]
    assert head[-1]["type"] == "llm.delta" and head[-1]["data"]["offset"] + len(
        head[-1]["data"]["text"]
    ) < len(answer)
    await asyncio.sleep(0.3)  # more of the answer is written while nobody watches

    if transport == "websocket":
        ws = await connect(ws_app(owner), turn.pk, after=mid)
        tail, end = await read_until_end(ws)
    else:
        sse = await open_sse(turn.pk, await login(owner), (b"last-event-id", str(mid).encode()))
        tail, end, _ = await sse.events_until_end()
    await driving

    frames = head + tail
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert frames == await db_threads.run(db_frames, turn.pk)
    assert answer_text(frames, 1) == answer
    assert end["status"] == "succeeded"
