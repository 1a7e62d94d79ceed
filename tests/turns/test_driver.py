"""The shared turn driver, with a scripted provider against the real database."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from pydantic import BaseModel

from agentlab.agent.providers.scripted import ScriptedProvider, call, final, text, tool_call, tool_calls
from agentlab.agent.tools import Tool, default_registry
from agentlab.agent.types import ProviderError
from turns import events as events_module
from turns.driver import CHAT, EVALUATION, drive_turn
from turns.driver import lease as lease_module
from turns.driver import record as record_module
from turns.models import Turn, TurnEvent
from turns.selectors import events_after
from turns.services import turn_cancel, turn_create, turn_interrupt, turn_resume

pytestmark = pytest.mark.django_db(transaction=True)


class _Count(BaseModel):
    label: str


def counting_registry(counter: dict[str, int], *, needs_approval: bool = False, delay: float = 0.0):
    """The default tools plus ``count``, which has a side effect we can count."""
    registry = default_registry()

    async def count(args: _Count, _ctx) -> str:
        counter[args.label] = counter.get(args.label, 0) + 1
        if delay:
            await asyncio.sleep(delay)
        return f"counted {args.label}"

    registry.register(
        Tool(
            name="count",
            description="count a label",
            parameters=_Count,
            fn=count,
            needs_approval=needs_approval,
        )
    )
    return registry


def types(turn_id: int) -> list[str]:
    return [e.type for e in events_after(turn_id=turn_id)]


async def test_answered_turn_writes_every_step_and_terminal_state(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="What is 6*7?")
    provider = ScriptedProvider(
        [
            tool_call("calculator", {"expression": "6*7"}, content="Let me compute.", usage=(20, 8)),
            final("42", evidence="calculator said 42", reasoning="6*7=42", usage=(30, 6)),
        ]
    )
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)

    assert result is not None and result.status == "succeeded" and result.answer == "42"
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome, turn.stop_reason, turn.phase) == (
        "succeeded",
        "answered",
        "final",
        "finish",
    )
    assert (turn.answer, turn.evidence, turn.reasoning, turn.steps) == (
        "42",
        "calculator said 42",
        "6*7=42",
        2,
    )
    assert turn.usage["input_tokens"] == 50 and turn.usage["output_tokens"] == 14 and turn.usage["calls"] == 2
    assert turn.usage["by_model"]["scripted"]["calls"] == 2
    assert turn.timings["total_ms"] >= turn.timings["act_ms"] >= 0
    assert (await db_threads.run(types, turn.pk)) == [
        "turn.queued",
        "turn.started",
        "phase",
        "thinking",
        "llm.usage",
        "tool.call",
        "tool.started",  # before the calculator ran; none for final_answer (no side effect)
        "tool.result",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "turn.answered",
    ]
    events = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.seq for e in events] == list(range(1, 14))
    assert turn.last_seq == 13
    assert events[7].data["result"]["output"] == "42"
    assert events[-1].data == {
        "stop_reason": "final",
        "steps": 2,
        "answer": "42",
        "evidence": "calculator said 42",
        "reasoning": "6*7=42",
        "answer_type": "string",
    }


async def test_replaying_the_events_rebuilds_the_final_state(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider(
        [tool_call("calculator", {"expression": "1+1"}, usage=(5, 1)), text("The answer is 2", usage=(7, 2))]
    )
    await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    state: dict = {"status": None, "steps": 0, "input_tokens": 0, "output_tokens": 0}
    for event in await db_threads.run(events_after, turn_id=turn.pk):
        if event.type == "turn.queued":
            state["status"] = "queued"
        elif event.type == "turn.started":
            state["status"] = "running"
        elif event.type == "llm.usage":
            state["steps"] = event.data["step"]
            state["input_tokens"] += event.data["input_tokens"]
            state["output_tokens"] += event.data["output_tokens"]
        elif event.type == "turn.answered":
            state.update(
                status="succeeded", answer=event.data["answer"], stop_reason=event.data["stop_reason"]
            )
    assert state == {
        "status": turn.status,
        "steps": turn.steps,
        "input_tokens": turn.usage["input_tokens"],
        "output_tokens": turn.usage["output_tokens"],
        "answer": turn.answer,
        "stop_reason": turn.stop_reason,
    }
    assert state["answer"] == "The answer is 2"


async def test_a_second_claim_does_nothing(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([final("1")])
    first = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    last_seq = (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq
    second = await drive_turn(turn.pk, policy=EVALUATION, provider=ScriptedProvider([]), db=db_threads)
    assert first is not None and second is None
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq == last_seq


async def test_evaluation_policy_cancels_on_a_tool_that_needs_approval(owner, db_threads):
    counter: dict[str, int] = {}
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([tool_call("count", {"label": "x"})])
    result = await drive_turn(
        turn.pk,
        policy=EVALUATION,
        provider=provider,
        db=db_threads,
        tools=counting_registry(counter, needs_approval=True),
    )
    assert result is not None and result.stop_reason == "approval_required"
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome, turn.stop_reason) == ("cancelled", "cancelled", "approval_required")
    assert counter == {}
    last = (await db_threads.run(events_after, turn_id=turn.pk))[-1]
    assert last.type == "turn.cancelled" and last.data["tool"] == "count"


@pytest.mark.parametrize(
    ("script", "stop", "cause"),
    [
        (
            [ProviderError("context too long", transient=False, kind="context_overflow")],
            "context_overflow",
            "context_overflow",
        ),
        ([ProviderError("quota", transient=False, kind="quota")], "provider_error", "provider_error"),
        ([tool_call("calculator", {"expression": "1"})] * 2, "max_steps", "max_steps"),
        ([tool_call("calculator", {"expression": "17 * 23"}), final("  ")], "empty_answer", "empty_answer"),
    ],
)
async def test_failed_stops_end_with_turn_failed_and_a_cause(owner, db_threads, script, stop, cause):
    turn = await db_threads.run(turn_create, owner=owner, question="q", max_steps=2)
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=ScriptedProvider(script), db=db_threads)
    assert result is not None and result.stop_reason == stop
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome, turn.stop_reason) == ("failed", "failed", stop)
    assert turn.meta["failure_cause"] == cause
    last = (await db_threads.run(events_after, turn_id=turn.pk))[-1]
    assert last.type == "turn.failed" and last.data["cause"] == cause


async def test_an_exception_in_the_driver_still_reaches_turn_failed(owner, db_threads, monkeypatch):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    calls = itertools.count()
    real = events_module.event_append_many

    def flaky(**kwargs):
        # the first llm.usage write fails: a broken database write mid-turn
        if any(e.type == "llm.usage" for e in kwargs["events"]) and next(calls) == 0:
            raise RuntimeError("disk on fire")
        return real(**kwargs)

    monkeypatch.setattr(events_module, "event_append_many", flaky)
    result = await drive_turn(
        turn.pk, policy=EVALUATION, provider=ScriptedProvider([final("1")]), db=db_threads
    )
    assert result is not None and result.status == "failed" and "disk on fire" in (result.error or "")
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.stop_reason) == ("failed", "error")
    assert (await db_threads.run(types, turn.pk))[-1] == "turn.failed"


async def test_cancel_stops_a_slow_llm_call_and_keeps_usage(owner, db_threads, monkeypatch):
    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.1)
    turn = await db_threads.run(turn_create, owner=owner, question="q")

    def slow(_messages):
        raise AssertionError("unreachable")

    provider = ScriptedProvider(
        [tool_call("calculator", {"expression": "2"}, usage=(3, 1)), text("late")], delay=0.0
    )
    original = provider.complete

    async def complete(messages, tools=None, **kw):
        if len(provider.calls) >= 1:
            await asyncio.sleep(30)
        return await original(messages, tools, **kw)

    provider.complete = complete
    task = asyncio.create_task(drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads))
    await asyncio.sleep(0.5)
    await db_threads.run(turn_cancel, turn_id=turn.pk, acting_user=owner)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await asyncio.wait_for(task, timeout=5)
    assert loop.time() - started < 2.0
    assert result is not None and result.stop_reason == "cancelled"
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome) == ("cancelled", "cancelled")
    assert turn.usage["input_tokens"] == 3 and turn.usage["calls"] == 1
    assert turn.meta["cancel"]["by"] == "owner"
    last = (await db_threads.run(events_after, turn_id=turn.pk))[-1]
    assert (last.type, last.data["by"]) == ("turn.cancelled", "owner")


async def test_resume_reuses_recorded_replies_and_tool_results(owner, db_threads):
    """A turn cut off after its first tool result continues at the next seq,
    without asking the LLM again for the recorded step or re-running the tool."""
    counter: dict[str, int] = {}
    registry = counting_registry(counter)
    turn = await db_threads.run(turn_create, owner=owner, question="count twice")

    class Killed(BaseException):
        pass

    first = ScriptedProvider(
        [
            tool_calls(call("count", {"label": "a"}), call("count", {"label": "b"}), usage=(11, 3)),
        ]
    )
    real = record_module.Recorder.__call__
    seen = itertools.count()

    async def dying(self, report):
        await real(self, report)
        if next(seen) == 2:  # after the completion, the first tool.started and its result are stored
            raise Killed()

    record_module.Recorder.__call__ = dying
    try:
        with pytest.raises(Killed):
            await drive_turn(turn.pk, policy=EVALUATION, provider=first, db=db_threads, tools=registry)
    finally:
        record_module.Recorder.__call__ = real
    assert counter == {"a": 1}
    before = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert before.status == "running"

    assert await db_threads.run(turn_interrupt, turn_id=turn.pk, reason="worker died")
    await db_threads.run(turn_resume, turn_id=turn.pk)
    second = ScriptedProvider([final("done", usage=(13, 2))])
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=second, db=db_threads, tools=registry)

    assert result is not None and result.answer == "done"
    assert counter == {"a": 1, "b": 1}
    assert len(second.calls) == 1  # only the step after the recorded one
    # the resumed request carries the recorded assistant turn and both tool results
    roles = [m["role"] for m in second.calls[0]]
    assert roles.count("tool") == 2
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert turn.steps == 2 and turn.usage["input_tokens"] == 24 and turn.usage["calls"] == 2
    events = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events] == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.call",
        "tool.started",
        "tool.result",
        "turn.interrupted",
        "turn.resumed",
        "turn.started",
        "phase",
        "tool.started",
        "tool.result",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "turn.answered",
    ]
    assert await db_threads.run(TurnEvent.objects.filter(turn_id=turn.pk, type="tool.result").count) == 3


async def test_a_driver_whose_turn_was_swept_writes_nothing_more(owner, db_threads, monkeypatch):
    """A slow driver presumed dead (its turn marked interrupted, then resumed
    and claimed by another job) cannot append to the log any more."""
    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.1)
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    release = asyncio.Event()
    slow = ScriptedProvider([tool_call("calculator", {"expression": "2"}), final("late")])
    original = slow.complete

    async def complete(messages, tools=None, **kw):
        if len(slow.calls) == 1:
            await release.wait()  # the LLM hangs; the loop cannot see the cancel until it returns
        return await original(messages, tools, **kw)

    slow.complete = complete
    zombie = asyncio.create_task(drive_turn(turn.pk, policy=EVALUATION, provider=slow, db=db_threads))
    while (await db_threads.run(Turn.objects.get, pk=turn.pk)).steps < 1:
        await asyncio.sleep(0.05)
    assert await db_threads.run(turn_interrupt, turn_id=turn.pk, reason="heartbeat stale")
    await db_threads.run(turn_resume, turn_id=turn.pk)
    fresh = await drive_turn(
        turn.pk, policy=EVALUATION, provider=ScriptedProvider([final("fresh")]), db=db_threads
    )
    assert fresh is not None and fresh.answer == "fresh"
    seqs_before = [e.seq for e in await db_threads.run(events_after, turn_id=turn.pk)]
    release.set()
    await asyncio.wait_for(zombie, timeout=5)
    events = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.seq for e in events] == seqs_before  # the zombie added nothing
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.answer) == ("succeeded", "fresh")
    assert events[-1].type == "turn.answered"


class _LoadingProvider(ScriptedProvider):
    """A provider whose model is not in memory until ``load`` (the embedded one)."""

    def __init__(self, script):
        super().__init__(script)
        self.ready = False
        self.loads = 0

    def load(self) -> None:
        self.loads += 1
        self.ready = True


async def test_a_model_not_yet_loaded_shows_phase_load_then_acts(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = _LoadingProvider([final("42")])
    result = await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
    assert result is not None and result.answer == "42" and provider.loads == 1
    events = await db_threads.run(events_after, turn_id=turn.pk)
    phases = [e.data["phase"] for e in events if e.type == "phase"]
    assert phases[:3] == ["act", "load", "act"]
    load_at = next(e.seq for e in events if e.type == "phase" and e.data["phase"] == "load")
    first_step = next(e.seq for e in events if e.type in ("thinking", "llm.usage", "tool.call"))
    assert load_at < first_step  # loaded before the first LLM call

    again = await db_threads.run(turn_create, owner=owner, question="q")
    await drive_turn(again.pk, policy=CHAT, provider=ScriptedProvider([final("43")]), db=db_threads)
    events = await db_threads.run(events_after, turn_id=again.pk)
    assert "load" not in [
        e.data["phase"] for e in events if e.type == "phase"
    ]  # a provider without the notion (an endpoint) never shows it


def test_the_preload_builds_nothing_for_an_endpoint_and_loads_the_embedded_model(settings, monkeypatch):
    from turns import llm

    built: list[object] = []

    class Embedded:
        model = "m"

        def load(self) -> None:
            built.append(self)

    monkeypatch.setattr(llm, "get_provider", lambda: Embedded())
    settings.AGENTLAB_LLM_BASE_URL = "http://127.0.0.1:9/v1"
    llm.preload_configured_model()
    assert built == []
    settings.AGENTLAB_LLM_BASE_URL = None
    llm.preload_configured_model()
    assert len(built) == 1
