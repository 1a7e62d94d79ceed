"""Streamed text as ``llm.delta`` events: the driver's coalescing bounds, the
order of the log, a retried completion, and the evaluation policy's not
streaming (``turns.driver.record``)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from agentlab.agent.providers.scripted import Cut, ScriptedProvider, final, text, tool_call
from agentlab.agent.streaming import TextDelta
from turns.driver import CHAT, EVALUATION, drive_turn
from turns.driver.record import DeltaCoalescer
from turns.event_types import LLMDeltaData
from turns.selectors import events_after
from turns.services import turn_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("stream_settings")]

ANSWER = ("The answer is **42**: six times seven, as the calculator says. " * 4).strip()


def frames_of(turn_id: int) -> list[dict]:
    return [e.as_frame() for e in events_after(turn_id=turn_id)]


async def test_coalescing_writes_at_most_one_event_per_interval_and_loses_no_text():
    written: list[tuple[float, LLMDeltaData]] = []

    async def write(events):
        await asyncio.sleep(0.005)  # a database write takes a while
        written.extend((time.monotonic(), e.data) for e in events)

    deltas = DeltaCoalescer(attempt=1, write=write, interval_s=0.05)
    sent = ""
    started = time.monotonic()
    for i in range(300):  # 300 one-token fragments over ~0.6 s
        piece = f"t{i} "
        sent += piece
        deltas(TextDelta(step=1, completion=1, text=piece))
        await asyncio.sleep(0.002)
    elapsed = time.monotonic() - started
    rest = [e.data for e in await deltas.drain()]
    data = [d for _, d in written] + rest

    assert "".join(d["text"] for d in data) == sent
    assert [d["offset"] for d in data] == [sum(len(x["text"]) for x in data[:i]) for i in range(len(data))]
    assert len(written) <= elapsed / 0.05 + 2  # about one write per interval, not 300
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(written)]
    assert min(gaps) >= 0.04
    await deltas.close()


async def test_a_completion_writes_a_bounded_number_of_events():
    written = []

    async def write(events):
        written.extend(events)

    deltas = DeltaCoalescer(
        attempt=1, write=write, interval_s=0.001, slow_after=5, slow_interval_s=0.002, max_events=8
    )
    for i in range(400):
        deltas(TextDelta(step=1, completion=1, text=str(i % 10)))
        await asyncio.sleep(0.001)
    rest = await deltas.drain()
    assert len(written) + len(rest) <= 8 and len(rest) == 1  # the last one carries what was held
    assert "".join(e.data["text"] for e in [*written, *rest]) == "0123456789" * 40
    await deltas.close()


async def test_a_chat_turn_writes_deltas_before_each_steps_record(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="What is 6*7?")
    provider = ScriptedProvider(
        [tool_call("calculator", {"expression": "6*7"}, content="I will multiply."), text(ANSWER)],
        stream_chars=2,
        stream_delay=0.002,
    )
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    frames = await db_threads.run(frames_of, turn.pk)
    types = [f["type"] for f in frames]

    deltas = [f for f in frames if f["type"] == "llm.delta"]
    assert {(d["data"]["attempt"], d["data"]["step"], d["data"]["completion"]) for d in deltas} == {
        (1, 1, 1),
        (1, 2, 1),
    }
    for step, visible in ((1, "I will multiply."), (2, ANSWER)):
        mine = [d["data"] for d in deltas if d["data"]["step"] == step]
        assert "".join(d["text"] for d in mine) == visible
        last_delta = max(f["seq"] for f in deltas if f["data"]["step"] == step)
        usage = next(f["seq"] for f in frames if f["type"] == "llm.usage" and f["data"]["step"] == step)
        assert last_delta < usage  # text first, then the step's record
    # 2-character fragments every 2 ms: the answer's ~130 fragments are coalesced
    assert len([d for d in deltas if d["data"]["step"] == 2]) < 130 / 4
    assert types[-1] == "turn.answered" and frames[-1]["data"]["answer"] == ANSWER


async def test_a_retried_completion_starts_its_text_again(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([Cut("The answer is 4"), final("42")], stream_chars=3, stream_delay=0.05)
    await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    deltas = [f["data"] for f in await db_threads.run(frames_of, turn.pk) if f["type"] == "llm.delta"]
    first = [d for d in deltas if d["completion"] == 1]
    second = [d for d in deltas if d["completion"] == 2]
    assert first and "".join(d["text"] for d in first) in "The answer is 4"
    assert second[0]["offset"] == 0 and "".join(d["text"] for d in second) == "42"


async def test_only_the_chat_policy_streams(owner, db_threads):
    """The documented policy difference (docs/architecture.md#the-driver): an evaluation turn's LLM
    calls are not streamed and write no ``llm.delta``; the rest of the log is
    the same as a chat turn's."""
    logs = {}
    for policy in (CHAT, EVALUATION):
        turn = await db_threads.run(turn_create, owner=owner, question="q")
        provider = ScriptedProvider(
            [tool_call("calculator", {"expression": "6*7"}, id="c1"), text(ANSWER)], stream_chars=4
        )
        await drive_turn(turn.pk, policy=policy, provider=provider, db=db_threads)
        logs[policy.name] = [(f["type"], f["data"]) for f in await db_threads.run(frames_of, turn.pk)]
    assert any(t == "llm.delta" for t, _ in logs["chat"])
    assert not any(t == "llm.delta" for t, _ in logs["evaluation"])

    def comparable(log):
        return [
            (t, {k: v for k, v in d.items() if k not in ("job_id", "kind", "idempotency_key")})
            for t, d in log
            if t != "llm.delta"
        ]

    assert comparable(logs["chat"]) == comparable(logs["evaluation"])
