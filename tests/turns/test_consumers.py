"""The turn stream consumer against the real database (docs/architecture.md#the-event-log;
docs/chat-and-api.md#the-websocket-protocol)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections, transaction

from agentlab.agent.providers.scripted import ScriptedProvider, Slow, final, text, tool_call
from turns.consumers import TurnStreamConsumer
from turns.driver import CHAT, drive_turn
from turns.events import NewEvent, event_append, event_append_many
from turns.models import Turn
from turns.selectors import events_after
from turns.services import turn_cancel, turn_create

from .conftest import ws_app

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("stream_settings")]


@pytest.fixture(autouse=True)
async def _doorbell_on_this_loop():
    """As daphne does with the in-memory layer (``config.startup``): doorbells
    are delivered on the loop the consumers run on."""
    from turns.doorbell import doorbell

    doorbell.set_loop(asyncio.get_running_loop())
    yield


async def connect(app, turn_id: int, after: int | None = None) -> WebsocketCommunicator:
    path = f"/ws/turns/{turn_id}/" + (f"?after={after}" if after is not None else "")
    communicator = WebsocketCommunicator(app, path)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def read_until_end(communicator: WebsocketCommunicator, timeout: float = 10) -> tuple[list[dict], dict]:
    """Frames until ``stream.end`` (heartbeats dropped); returns (events, end frame)
    after checking that the server then closes normally."""
    events: list[dict] = []
    while True:
        frame = json.loads(await communicator.receive_from(timeout=timeout))
        if frame["type"] == "heartbeat":
            continue
        if frame["type"] == "stream.end":
            close = await communicator.receive_output(timeout=timeout)
            assert close == {"type": "websocket.close", "code": 1000}
            return events, frame
        events.append(frame)


async def read_events(communicator: WebsocketCommunicator, count: int) -> list[dict]:
    events: list[dict] = []
    while len(events) < count:
        frame = json.loads(await communicator.receive_from(timeout=5))
        if frame["type"] != "heartbeat":
            events.append(frame)
    return events


def db_frames(turn_id: int) -> list[dict]:
    return [e.as_frame() for e in events_after(turn_id=turn_id)]


def slow_script():
    return [
        Slow(0.3, tool_call("calculator", {"expression": "6*7"}, usage=(5, 2))),
        Slow(0.3, tool_call("calculator", {"expression": "42+1"}, usage=(6, 2))),
        Slow(0.3, final("43", evidence="calculator", usage=(7, 3))),
    ]


async def test_replay_then_live_sends_every_event_once_and_ends(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    await db_threads.run(event_append, turn_id=turn.pk, type="thinking", data={"text": "before"})
    communicator = await connect(ws_app(owner), turn.pk, after=0)
    replayed = await read_events(communicator, 2)
    assert [(f["seq"], f["type"]) for f in replayed] == [(1, "turn.queued"), (2, "thinking")]

    driving = asyncio.create_task(
        drive_turn(turn.pk, policy=CHAT, provider=ScriptedProvider(slow_script()), db=db_threads)
    )
    live, end = await read_until_end(communicator)
    await driving

    frames = replayed + live
    assert frames == await db_threads.run(db_frames, turn.pk)
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1]["type"] == "turn.answered" and frames[-1]["data"]["answer"] == "43"
    assert end == {"type": "stream.end", "status": "succeeded"}
    assert "at" in frames[0] and set(frames[0]) == {"seq", "type", "data", "at"}
    await communicator.disconnect()


async def test_reconnect_after_seq_gets_the_rest_exactly_once(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    driving = asyncio.create_task(
        drive_turn(turn.pk, policy=CHAT, provider=ScriptedProvider(slow_script()), db=db_threads)
    )
    first = await connect(ws_app(owner), turn.pk)
    head = await read_events(first, 4)
    await first.disconnect()
    k = head[-1]["seq"]
    await asyncio.sleep(0.4)  # more events are written while nobody watches

    second = await connect(ws_app(owner), turn.pk, after=k)
    tail, end = await read_until_end(second)
    await driving

    assert [f["seq"] for f in head] == [1, 2, 3, 4]
    assert [f["seq"] for f in tail] == list(range(k + 1, k + 1 + len(tail)))
    assert head + tail == await db_threads.run(db_frames, turn.pk)
    assert end["status"] == "succeeded"


async def test_joining_after_the_end_replays_everything_and_ends(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    await drive_turn(turn.pk, policy=CHAT, provider=ScriptedProvider([final("1")]), db=db_threads)

    communicator = await connect(ws_app(owner), turn.pk)
    events, end = await read_until_end(communicator)
    assert events == await db_threads.run(db_frames, turn.pk)
    assert end == {"type": "stream.end", "status": "succeeded"}

    # a client that saw the terminal event but not the end frame just gets the end
    again = await connect(ws_app(owner), turn.pk, after=events[-1]["seq"])
    assert await read_until_end(again) == ([], end)


async def test_an_event_committed_between_subscribe_and_replay_arrives_once(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    layer = get_channel_layer()
    real_group_add = layer.group_add

    async def group_add_then_append(group, channel):
        await real_group_add(group, channel)
        # committed (and rung) after we joined, before the replay reads
        await db_threads.run(event_append, turn_id=turn.pk, type="thinking", data={"text": "in between"})

    layer.group_add = group_add_then_append
    try:
        communicator = await connect(ws_app(owner), turn.pk)
        events = await read_events(communicator, 2)
    finally:
        layer.group_add = real_group_add
    await db_threads.run(turn_cancel, turn_id=turn.pk)
    rest, end = await read_until_end(communicator)

    assert [(f["seq"], f["type"]) for f in events + rest] == [
        (1, "turn.queued"),
        (2, "thinking"),
        (3, "turn.cancelled"),
    ]
    assert end["status"] == "cancelled"


class CountingConsumer(TurnStreamConsumer):
    """Counts the doorbells that reached it (to show some were dropped)."""

    doorbells = 0

    async def turn_doorbell(self, message):
        type(self).doorbells += 1
        await super().turn_doorbell(message)


@pytest.mark.parametrize("layer_fixture", ["stream_settings", "redis_layer"])
async def test_a_burst_of_500_events_with_capacity_100_arrives_complete_and_in_order(
    owner, db_threads, request, layer_fixture
):
    request.getfixturevalue(layer_fixture)
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    CountingConsumer.doorbells = 0
    user = owner

    async def app(scope, receive, send):
        return await CountingConsumer.as_asgi()(
            dict(scope, user=user, url_route={"kwargs": {"turn_id": turn.pk}}), receive, send
        )

    communicator = WebsocketCommunicator(app, f"/ws/turns/{turn.pk}/")
    assert (await communicator.connect(timeout=5))[0]
    assert (await read_events(communicator, 1))[0]["seq"] == 1

    def burst() -> None:
        # 500 appends committed at once: their 500 doorbells are rung together,
        # faster than the consumer drains its channel (capacity 100).
        try:
            with transaction.atomic():
                for i in range(500):
                    event_append_many(turn_id=turn.pk, events=[NewEvent("thinking", {"i": i})])
            turn_cancel(turn_id=turn.pk)
        finally:
            connections.close_all()

    writer = threading.Thread(target=burst)
    writer.start()
    try:
        events, end = await read_until_end(communicator, timeout=30)
    finally:
        await asyncio.to_thread(writer.join)
        # A consumer left connected is cancelled by the event loop's teardown,
        # where a Redis-layer receive in flight was seen to keep the loop
        # from closing for minutes (pytest-timeout's 300 s): close it here.
        await communicator.disconnect()

    assert [f["seq"] for f in events] == list(range(2, 503))
    assert [f["data"]["i"] for f in events[:-1]] == list(range(500))
    assert events[-1]["type"] == "turn.cancelled" and end["status"] == "cancelled"
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq == 502
    assert CountingConsumer.doorbells < 501  # some doorbells were dropped, none of the events


async def test_heartbeats_arrive_while_the_llm_is_silent_and_carry_no_seq(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([Slow(1.5, final("late"))])
    driving = asyncio.create_task(drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads))
    communicator = await connect(ws_app(owner), turn.pk)
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != "stream.end":
        frames.append(json.loads(await communicator.receive_from(timeout=5)))
    await driving

    heartbeats = [f for f in frames if f["type"] == "heartbeat"]
    assert len(heartbeats) >= 4  # 1.5 s of silence, a heartbeat every 0.2 s
    assert all(f == {"type": "heartbeat"} for f in heartbeats)
    events = [f for f in frames if "seq" in f]
    assert [f["seq"] for f in events] == list(range(1, len(events) + 1))
    # the silence is between turn.started/phase and the answer
    silent = [f["type"] for f in frames[frames.index(events[2]) + 1 :]]
    assert silent[:4] == ["heartbeat"] * 4


@pytest.mark.parametrize(
    ("who", "turn_exists", "code"),
    [("anonymous", True, 4401), ("outsider", True, 4403), ("owner", False, 4404)],
)
async def test_refused_connections_get_distinct_close_codes(
    owner, outsider, db_threads, who, turn_exists, code
):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    user = {"anonymous": None, "outsider": outsider, "owner": owner}[who]
    communicator = WebsocketCommunicator(
        ws_app(user), f"/ws/turns/{turn.pk if turn_exists else turn.pk + 999}/"
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected  # accepted, then closed with a code the page can explain
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": code}


@pytest.mark.parametrize("after", ["x", "", "%D9%A3", "-1"])  # %D9%A3: an Arabic-Indic three
async def test_a_bad_after_is_refused(owner, db_threads, after):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    communicator = WebsocketCommunicator(ws_app(owner), f"/ws/turns/{turn.pk}/?after={after}")
    await communicator.connect(timeout=5)
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4400}


async def test_staff_may_watch_any_turn(owner, staff, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    communicator = await connect(ws_app(staff), turn.pk)
    assert (await read_events(communicator, 1))[0]["type"] == "turn.queued"
    await communicator.disconnect()


async def test_the_asgi_application_authenticates_by_session_and_checks_the_origin(owner, outsider, client):
    from config.asgi import application

    turn = await sync_to_async(turn_create)(owner=owner, question="q")

    async def attempt(user, origin=b"http://localhost"):
        headers = [(b"host", b"localhost")]
        if origin:
            headers.append((b"origin", origin))
        if user is not None:
            await sync_to_async(client.force_login)(user)
            headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
        communicator = WebsocketCommunicator(application, f"/ws/turns/{turn.pk}/", headers=headers)
        connected, code = await communicator.connect(timeout=5)
        if not connected:
            return ("rejected", code)
        frame = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return ("accepted", frame)

    try:
        kind, frame = await attempt(owner)
        assert kind == "accepted" and json.loads(frame["text"])["seq"] == 1
        assert await attempt(outsider) == ("accepted", {"type": "websocket.close", "code": 4403})
        assert await attempt(None) == ("accepted", {"type": "websocket.close", "code": 4401})
        assert (await attempt(owner, origin=b"http://evil.example"))[0] == "rejected"
    finally:
        await sync_to_async(connections.close_all, thread_sensitive=True)()


async def test_a_coalesced_doorbell_out_of_order_or_with_a_gap_sends_each_seq_once(
    owner, db_threads, monkeypatch
):
    """A doorbell may carry several rings' frames in any order; only the run
    that continues the stream is used, the rest is read from the database."""
    import turns.events as events_module

    turn = await db_threads.run(turn_create, owner=owner, question="q")
    communicator = await connect(ws_app(owner), turn.pk)
    assert [f["seq"] for f in await read_events(communicator, 1)] == [1]
    monkeypatch.setattr(events_module, "ring_turn", lambda *a, **k: None)  # we ring by hand
    for i in range(4):
        await db_threads.run(event_append, turn_id=turn.pk, type="thinking", data={"i": i})
    frames = await db_threads.run(db_frames, turn.pk)  # seqs 1..5
    layer = get_channel_layer()
    # seqs 3 and 2 (out of order) and 5 (after a gap): 2, 3 from the doorbell, 4, 5 from the database
    await layer.group_send(
        f"turn.{turn.pk}", {"type": "turn.doorbell", "events": [frames[2], frames[1], frames[4]]}
    )
    got = await read_events(communicator, 4)
    assert [f["seq"] for f in got] == [2, 3, 4, 5]
    assert got == frames[1:]
    await layer.group_send(f"turn.{turn.pk}", {"type": "turn.doorbell", "events": frames})
    later = []
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.0
    while loop.time() < until:  # heartbeats keep coming: read for a bounded time
        if not await communicator.receive_nothing(timeout=0.2):
            later.append(json.loads(await communicator.receive_from()))
    assert [f for f in later if f["type"] != "heartbeat"] == []  # nothing sent twice
    await communicator.disconnect()


@pytest.mark.parametrize("bad_id", ["abc", "-1", "0", "99999999999999999999999"])
async def test_a_malformed_turn_id_is_refused_like_an_unknown_turn(owner, bad_id):
    communicator = WebsocketCommunicator(ws_app(owner), f"/ws/turns/{bad_id}/")
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}


# --- the shared heartbeat ticker (one per event loop) ------------------------------


@pytest.fixture
def stream_reads():
    """``(sql, params)`` of every SELECT on the turn and event tables run by a
    database connection opened during the test (the stream pool's threads
    open theirs when the first consumer connects)."""
    from django.db.backends.signals import connection_created

    seen: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("SELECT") and (
            '"turns_turn"' in sql or '"turns_turnevent"' in sql
        ):
            seen.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    def install(sender, connection, **kwargs):
        # The signal fires again when a pool thread's connection reconnects
        # (an idle check retired it): one wrapper per connection, or every
        # read after a reconnect would be recorded twice.
        if record not in connection.execute_wrappers:
            connection.execute_wrappers.append(record)

    connection_created.connect(install, weak=False)
    yield seen
    connection_created.disconnect(install)


def tick_reads(reads: list[tuple[str, tuple]]) -> list[tuple]:
    """The turn ids of each batched ``last_seq`` read among ``reads``."""
    return [params for sql, params in reads if 'FROM "turns_turn"' in sql and " IN (" in sql]


def event_reads(reads: list[tuple[str, tuple]]) -> list[tuple]:
    """The parameters (``after``, turn id) of each event read among ``reads``."""
    return [params for sql, params in reads if 'FROM "turns_turnevent"' in sql]


async def test_idle_streams_on_many_turns_tick_with_one_last_seq_read_per_step(
    owner, db_threads, stream_reads, stream_settings
):
    from turns.live import TICK_STEP_S, stream_ticker

    stream_settings.HEARTBEAT_S = 1.0
    step = min(TICK_STEP_S, 1.0 / 4)
    turns = [await db_threads.run(turn_create, owner=owner, question=f"q{i}") for i in range(20)]
    communicators = await asyncio.gather(*(connect(ws_app(owner), t.pk) for t in turns))
    for communicator in communicators:
        assert [f["seq"] for f in await read_events(communicator, 1)] == [1]
    assert len(stream_ticker()) == 20
    stream_reads.clear()
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def two_heartbeats(communicator):
        return [json.loads(await communicator.receive_from(timeout=5)) for _ in range(2)]

    frames = await asyncio.gather(*(two_heartbeats(c) for c in communicators))
    elapsed = loop.time() - started
    reads = list(stream_reads)

    assert all(got == [{"type": "heartbeat"}] * 2 for got in frames)
    assert event_reads(reads) == []  # nothing was appended: no consumer read its (empty) gap
    batches = tick_reads(reads)
    # at most one read per ticker step, not one per consumer (40 heartbeats)
    assert 1 <= len(batches) <= elapsed / step + 2
    assert all(len(ids) == len(set(ids)) for ids in batches)
    assert {i for ids in batches for i in ids} == {t.pk for t in turns}
    # 20 consumers tick once a second in at most 5 steps: some read serves 4 or more
    assert max(len(ids) for ids in batches) >= 4
    for communicator in communicators:
        await communicator.disconnect()


async def test_a_lost_doorbell_on_one_of_many_turns_is_recovered_on_the_next_tick(
    owner, db_threads, stream_reads
):
    turns = [await db_threads.run(turn_create, owner=owner, question=f"q{i}") for i in range(8)]
    communicators = [await connect(ws_app(owner), t.pk) for t in turns]
    for communicator in communicators:
        assert [f["seq"] for f in await read_events(communicator, 1)] == [1]
    stream_reads.clear()
    lost = turns[3].pk
    layer = get_channel_layer()
    real_group_send = layer.group_send
    dropped = []

    async def group_send_losing_one_turn(group, message):
        if group == f"turn.{lost}":
            dropped.append(message)  # the transport lost it
            return
        await real_group_send(group, message)

    layer.group_send = group_send_losing_one_turn
    try:
        for turn in turns:
            await db_threads.run(event_append, turn_id=turn.pk, type="thinking", data={"turn": turn.pk})
        # heartbeats keep coming: bound the whole wait, not each frame's
        got = [await asyncio.wait_for(read_events(c, 1), 5) for c in communicators]
    finally:
        layer.group_send = real_group_send
    gap_reads = event_reads(stream_reads)

    assert len(dropped) == 1 and [f["seq"] for f in dropped[0]["events"]] == [2]
    for turn, events in zip(turns, got, strict=True):
        assert events == (await db_threads.run(db_frames, turn.pk))[1:]
        assert events[0]["data"] == {"turn": turn.pk}
    # the others had their event from the doorbell; only the consumer of the
    # lost turn read its gap (seq > 1), on a tick that saw its last_seq at 2
    assert [(p[0], p[1]) for p in gap_reads] == [(1, lost)]
    # and nothing is sent twice afterwards
    await asyncio.sleep(0.5)
    for communicator in communicators:
        while not await communicator.receive_nothing(timeout=0.05):
            assert json.loads(await communicator.receive_from())["type"] == "heartbeat"
        await communicator.disconnect()


async def test_consumers_that_disconnect_or_end_leave_the_ticker_which_stops_when_empty(owner, db_threads):
    from turns.live import stream_ticker

    turns = [await db_threads.run(turn_create, owner=owner, question=f"q{i}") for i in range(3)]
    communicators = [await connect(ws_app(owner), t.pk) for t in turns]
    for communicator in communicators:
        await read_events(communicator, 1)
    ticker = stream_ticker()
    assert len(ticker) == 3 and ticker.running

    await communicators[0].disconnect()
    assert len(ticker) == 2
    await db_threads.run(turn_cancel, turn_id=turns[1].pk)  # its stream ends
    events, end = await read_until_end(communicators[1])
    assert [f["type"] for f in events] == ["turn.cancelled"] and end["status"] == "cancelled"
    assert len(ticker) == 1
    # the one left still gets its heartbeats
    assert json.loads(await communicators[2].receive_from(timeout=5)) == {"type": "heartbeat"}

    await communicators[2].disconnect()
    assert len(ticker) == 0
    await asyncio.sleep(0.2)  # the task notices on its next step
    assert not ticker.running

    # a new consumer starts it again
    again = await connect(ws_app(owner), turns[2].pk)
    await read_events(again, 1)
    assert len(ticker) == 1 and ticker.running
    assert json.loads(await again.receive_from(timeout=5)) == {"type": "heartbeat"}
    await again.disconnect()


ACCEPT = '{"verdict": "accept", "note": "391 is 17 * 23", "retry_instruction": null}'


async def test_a_review_later_than_the_answer_arrives_live_before_the_stream_ends(
    owner, db_threads, settings
):
    settings.AGENTLAB_REVIEW = True
    settings.REVIEW_WAIT_S = 0.3
    turn = await db_threads.run(turn_create, owner=owner, question="What is 17 * 23?")
    communicator = await connect(ws_app(owner), turn.pk, after=0)
    provider = ScriptedProvider([final("391"), Slow(1.5, text(ACCEPT))])
    driving = asyncio.create_task(drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads))
    events, end = await read_until_end(communicator)
    await driving
    await communicator.disconnect()
    answered, review = events[-2], events[-1]
    assert answered["type"] == "turn.answered" and answered["data"]["review_pending"] is True
    assert review["type"] == "review" and review["data"]["late"] is True
    assert review["data"]["verdict"] == "accept" and review["seq"] == answered["seq"] + 1
    assert end == {"type": "stream.end", "status": "succeeded"}
    assert events == await db_threads.run(db_frames, turn.pk)


async def test_a_client_that_has_the_answer_waits_on_the_stream_for_its_late_review(
    owner, db_threads, settings
):
    settings.AGENTLAB_REVIEW = True
    settings.REVIEW_WAIT_S = 0.2
    turn = await db_threads.run(turn_create, owner=owner, question="What is 17 * 23?")
    provider = ScriptedProvider([final("391"), Slow(1.5, text(ACCEPT))])
    driving = asyncio.create_task(drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads))
    while (await db_threads.run(Turn.objects.get, pk=turn.pk)).status != "succeeded":
        await asyncio.sleep(0.02)
    answered_seq = (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq
    # a reload after the answer: the client has every event, the review is still running
    communicator = await connect(ws_app(owner), turn.pk, after=answered_seq)
    events, end = await read_until_end(communicator)
    await driving
    await communicator.disconnect()
    assert [(e["seq"], e["type"]) for e in events] == [(answered_seq + 1, "review")]
    assert end["status"] == "succeeded"


async def test_an_answer_reviewed_in_time_ends_the_stream_at_once(owner, db_threads, settings):
    settings.AGENTLAB_REVIEW = True
    settings.REVIEW_WAIT_S = 5
    turn = await db_threads.run(turn_create, owner=owner, question="What is 17 * 23?")
    provider = ScriptedProvider([final("391"), text(ACCEPT)])
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    frames = await db_threads.run(db_frames, turn.pk)
    assert [f["type"] for f in frames][-3:] == ["review", "phase", "turn.answered"]
    assert "review_pending" not in frames[-1]["data"]
    communicator = await connect(ws_app(owner), turn.pk, after=frames[-1]["seq"])
    events, end = await read_until_end(communicator, timeout=2)
    await communicator.disconnect()
    assert events == [] and end["status"] == "succeeded"


async def test_a_turn_retried_before_its_late_review_ends_the_stream_at_its_new_end(owner, db_threads):
    from turns.event_types import TurnAnsweredData

    turn = await db_threads.run(turn_create, owner=owner, question="q")
    answered = TurnAnsweredData(stop_reason="final", steps=1, answer="1", evidence="", reasoning="")
    pending = {**answered, "review_pending": True}
    await db_threads.run(event_append, turn_id=turn.pk, type="turn.answered", data=pending)
    communicator = await connect(ws_app(owner), turn.pk, after=0)
    first = await read_events(communicator, 2)
    assert [f["type"] for f in first] == ["turn.queued", "turn.answered"]  # and the stream waits
    # the review never comes; the turn is run again and answered without one pending
    await db_threads.run(event_append, turn_id=turn.pk, type="turn.answered", data=dict(answered))
    events, end = await read_until_end(communicator, timeout=5)
    await communicator.disconnect()
    assert [f["type"] for f in events] == ["turn.answered"] and end["status"] == "succeeded"
