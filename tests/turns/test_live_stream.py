"""``turns.live.TurnStream`` on its own: a fake log and a recording transport,
no database or channel layer, so each ordering of reads is exact."""

from __future__ import annotations

from typing import Any

import pytest

from turns.live import REPLAY_BATCH, TurnStream


class Recorder:
    """A ``StreamTransport`` that keeps what it was given."""

    def __init__(self) -> None:
        self.events: list[int] = []
        self.ended: str | None = None

    async def send_event(self, frame: dict[str, Any]) -> None:
        self.events.append(frame["seq"])

    async def send_heartbeat(self) -> None:
        pass

    async def send_end(self, status: str) -> None:
        self.ended = status


def log_of(count: int, terminal: str = "turn.cancelled") -> list[dict[str, Any]]:
    """Frames 1..count, the last one ``terminal``."""
    return [
        {"seq": seq, "type": terminal if seq == count else "thinking", "data": {}, "at": ""}
        for seq in range(1, count + 1)
    ]


def reader(log: list[dict[str, Any]]):
    async def read(turn_id: int, after: int, limit: int) -> list[dict[str, Any]]:
        return [f for f in log if f["seq"] > after][:limit]

    return read


@pytest.mark.parametrize("after", [0, 1, 2, 3])
async def test_a_catch_up_whose_last_full_batch_ends_with_the_terminal_event_ends_the_stream(after):
    # 502 events read from after=2 are exactly one batch of 500 whose last
    # frame is terminal: the stream used to wait for more and never end.
    log = log_of(2 + REPLAY_BATCH)
    transport = Recorder()
    stream = TurnStream(turn_id=1, after=after, transport=transport, read=reader(log))
    await stream.start(status="running", last_seq=after)
    assert transport.events == list(range(after + 1, len(log) + 1))
    assert transport.ended == "cancelled" and stream.ended


async def test_a_tick_that_reads_exactly_one_full_batch_ending_in_the_terminal_event_ends_the_stream():
    log = log_of(1 + REPLAY_BATCH)
    transport = Recorder()
    stream = TurnStream(turn_id=1, after=0, transport=transport, read=reader(log[:1]))
    await stream.start(status="running", last_seq=1)
    assert transport.events == [1] and transport.ended is None
    stream._read = reader(log)  # the rest committed; its doorbells were lost
    await stream.tick(len(log))
    assert transport.events == list(range(1, len(log) + 1))
    assert transport.ended == "cancelled"


async def test_a_full_batch_ending_in_an_answer_whose_review_is_pending_waits_for_the_review():
    log = log_of(REPLAY_BATCH, terminal="turn.answered")
    log[-1]["data"] = {"review_pending": True}
    transport = Recorder()
    stream = TurnStream(turn_id=1, after=0, transport=transport, read=reader(log))
    await stream.start(status="running", last_seq=0)
    assert transport.events == list(range(1, REPLAY_BATCH + 1)) and transport.ended is None
    log.append({"seq": REPLAY_BATCH + 1, "type": "review", "data": {}, "at": ""})
    await stream.tick(REPLAY_BATCH + 1)
    assert transport.events[-1] == REPLAY_BATCH + 1 and transport.ended == "succeeded"
