"""Background turns: start, the inline executor, the Celery task, cancel, sweep, resume."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.core.management import CommandError, call_command
from django.utils import timezone

from agentlab.agent.providers.scripted import ScriptedProvider, Slow, call, final, text, tool_call, tool_calls
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply
from common.errors import NotFound, StateConflict
from turns.driver import turn_claim
from turns.jobs import handover as jobs
from turns.jobs import ids
from turns.jobs.sweep import SweepResult, turns_sweep, turns_sweep_stale
from turns.models import Conversation, Turn, TurnEvent
from turns.selectors import events_after
from turns.services import enqueue as dispatch
from turns.services import (
    turn_cancel,
    turn_create,
    turn_interrupt,
    turn_resume_and_enqueue,
    turn_start,
)

from .conftest import ws_app
from .test_driver import counting_registry

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("stream_settings")]


def use_inline(provider, tools=None) -> jobs.InlineExecutor:
    executor = jobs.InlineExecutor(
        provider_factory=lambda: provider,
        tools_factory=(lambda: tools) if tools else jobs.job_tools,
        sweep_every_s=0,
    ).start()
    previous = jobs.inline_executor_reset(executor)
    assert previous is None
    return executor


def types(turn_id: int) -> list[str]:
    return [e.type for e in events_after(turn_id=turn_id)]


async def wait_for_status(db, turn_id: int, *statuses: str, timeout: float = 10) -> Turn:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        turn = await db.run(Turn.objects.get, pk=turn_id)
        if turn.status in statuses:
            return turn
        assert asyncio.get_running_loop().time() < deadline, f"turn {turn_id} still {turn.status}"
        await asyncio.sleep(0.05)


# --- start -------------------------------------------------------------------------


async def test_turn_start_runs_the_turn_in_the_inline_executor_after_commit(owner, db_threads):
    use_inline(ScriptedProvider([tool_call("calculator", {"expression": "6*7"}), final("42")]))
    conversation = await db_threads.run(Conversation.objects.create, owner=owner, title="c")
    turn = await db_threads.run(turn_start, conversation=conversation, question="6*7?", acting_user=owner)

    assert turn.status == "queued" and turn.owner_id == owner.pk and turn.position == 1
    turn = await wait_for_status(db_threads, turn.pk, "succeeded")
    assert (turn.outcome, turn.answer) == ("answered", "42")
    assert turn.job_id.startswith("inline-")
    assert (await db_threads.run(types, turn.pk))[-1] == "turn.answered"


async def test_a_second_active_turn_in_a_conversation_is_a_conflict(owner, db_threads):
    use_inline(ScriptedProvider([Slow(5, final("1"))]))
    conversation = await db_threads.run(Conversation.objects.create, owner=owner)
    first = await db_threads.run(turn_start, conversation=conversation, question="one", acting_user=owner)
    with pytest.raises(StateConflict):
        await db_threads.run(turn_start, conversation=conversation, question="two", acting_user=owner)
    assert await db_threads.run(Turn.objects.filter(conversation=conversation).count) == 1
    await db_threads.run(turn_cancel, turn_id=first.pk)
    await wait_for_status(db_threads, first.pk, "cancelled")


async def test_an_outsider_cannot_start_a_turn_in_someone_elses_conversation(owner, outsider, db_threads):
    conversation = await db_threads.run(Conversation.objects.create, owner=owner)
    with pytest.raises(NotFound):
        await db_threads.run(turn_start, conversation=conversation, question="q", acting_user=outsider)
    assert await db_threads.run(Turn.objects.count) == 0


async def test_a_duplicate_hand_over_does_nothing(owner, db_threads):
    provider = ScriptedProvider([final("1")])
    executor = use_inline(provider)
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    await asyncio.wrap_future(executor.submit(turn.pk))
    last_seq = (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq
    await asyncio.wrap_future(executor.submit(turn.pk))
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq == last_seq
    assert len(provider.calls) == 1


# --- the Celery task, run in this process against a stub LLM over HTTP ------------------


def test_the_celery_task_drives_a_turn_with_the_configured_provider(owner, settings):
    replies = [tool_call_reply("calculator", {"expression": "2+3"}), final_answer_reply("5", "calc", "2+3")]
    with StubLLMServer.script(replies) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-model"
        turn = turn_create(owner=owner, question="2+3?")
        from turns.jobs.tasks import turn_run

        turn_run.apply(args=(turn.pk,), task_id="task-1")
        turn_run.apply(args=(turn.pk,), task_id="task-2")  # a duplicate delivery: nothing happens
        assert stub.request_count == 2
    turn.refresh_from_db()
    assert (turn.status, turn.answer, turn.job_id.split(":")[0]) == ("succeeded", "5", "task-1")
    assert turn.usage["input_tokens"] == 20
    assert TurnEvent.objects.filter(turn=turn, type="turn.started").count() == 1


# --- cancel ------------------------------------------------------------------------------


async def test_cancel_stops_a_running_turn_inside_a_slow_llm_call_within_2s(owner, db_threads, monkeypatch):
    from turns.driver import lease

    monkeypatch.setattr(lease, "CANCEL_POLL_S", 0.1)
    provider = ScriptedProvider(
        [tool_call("calculator", {"expression": "1+1"}, usage=(12, 4)), Slow(60, final("never"))]
    )
    use_inline(provider)
    conversation = await db_threads.run(Conversation.objects.create, owner=owner)
    turn = await db_threads.run(turn_start, conversation=conversation, question="q", acting_user=owner)
    watcher = WebsocketCommunicator(ws_app(owner), f"/ws/turns/{turn.pk}/")
    assert (await watcher.connect(timeout=5))[0]
    while len(provider.calls) < 2:  # inside the slow second LLM call
        await asyncio.sleep(0.05)

    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    await db_threads.run(turn_cancel, turn_id=turn.pk)
    turn = await wait_for_status(db_threads, turn.pk, "cancelled", timeout=5)
    assert loop.time() - cancelled_at < 2.0

    assert (turn.outcome, turn.stop_reason) == ("cancelled", "cancelled")
    assert turn.usage["input_tokens"] == 12 and turn.usage["calls"] == 1
    assert (await db_threads.run(types, turn.pk))[-1] == "turn.cancelled"
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != "stream.end":
        frames.append(json.loads(await watcher.receive_from(timeout=5)))
    assert frames[-2]["type"] == "turn.cancelled" and frames[-1] == {
        "type": "stream.end",
        "status": "cancelled",
    }


async def test_cancelling_a_queued_turn_cancels_it_at_once(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    turn = await db_threads.run(turn_cancel, turn_id=turn.pk)
    assert (turn.status, turn.outcome) == ("cancelled", "cancelled")
    assert await db_threads.run(types, turn.pk) == ["turn.queued", "turn.cancelled"]


async def test_cancelling_a_finished_turn_is_a_conflict_that_changes_nothing(owner, db_threads):
    executor = use_inline(ScriptedProvider([final("1")]))
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    await asyncio.wrap_future(executor.submit(turn.pk))
    before = await db_threads.run(Turn.objects.get, pk=turn.pk)
    with pytest.raises(StateConflict):
        await db_threads.run(turn_cancel, turn_id=turn.pk)
    after = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (after.status, after.last_seq, after.cancel_requested, after.updated_at) == (
        "succeeded",
        before.last_seq,
        False,
        before.updated_at,
    )


# --- sweeper -----------------------------------------------------------------------------


def running_turn(owner, *, heartbeat_age_s: float) -> Turn:
    """A claimed turn whose worker wrote its last heartbeat ``heartbeat_age_s`` ago."""
    turn = turn_create(owner=owner, question="q")
    turn_claim(turn_id=turn.pk, job_id="gone")
    Turn.objects.filter(pk=turn.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age_s))
    return turn


def test_the_sweeper_interrupts_stale_turns_and_leaves_fresh_ones(owner):
    stale = running_turn(owner, heartbeat_age_s=300)
    fresh = running_turn(owner, heartbeat_age_s=1)
    queued = turn_create(owner=owner, question="q")

    assert turns_sweep_stale(stale_s=120) == 1
    assert turns_sweep_stale(stale_s=120) == 0  # idempotent

    stale.refresh_from_db(), fresh.refresh_from_db(), queued.refresh_from_db()
    assert (stale.status, fresh.status, queued.status) == ("interrupted", "running", "queued")
    last = events_after(turn_id=stale.pk)[-1]
    assert last.type == "turn.interrupted" and last.data["was"] == "running"
    assert last.seq == stale.last_seq


def test_sweep_turns_command(owner, capsys, monkeypatch):
    monkeypatch.setattr(dispatch, "turn_enqueue", lambda turn_id: None)
    stale = running_turn(owner, heartbeat_age_s=10)
    queued_turn(owner, age_s=10)
    call_command("sweep_turns", "--stale-s", "5")
    out = capsys.readouterr().out
    assert "marked 1 stale turn(s) interrupted" in out and "queued 1 lost turn(s) again" in out
    stale.refresh_from_db()
    assert stale.status == "interrupted"


def queued_turn(owner, *, age_s: float, kind: str = "chat") -> Turn:
    """A turn queued ``age_s`` seconds ago that no job has claimed."""
    turn = turn_create(owner=owner, question="6*7?", kind=kind)
    Turn.objects.filter(pk=turn.pk).update(updated_at=timezone.now() - timedelta(seconds=age_s))
    return Turn.objects.get(pk=turn.pk)


def test_the_sweep_hands_lost_queued_chat_turns_over_again_once_per_period(owner, monkeypatch):
    handed: list[int] = []
    monkeypatch.setattr(dispatch, "turn_enqueue", handed.append)
    lost = queued_turn(owner, age_s=300)
    recent = queued_turn(owner, age_s=1)
    evaluation = queued_turn(owner, age_s=300, kind="evaluation")  # run_eval drives its own
    running_turn(owner, heartbeat_age_s=300)

    assert turns_sweep(stale_s=120) == SweepResult(interrupted=1, requeued=1)
    assert handed == [lost.pk]
    # the hand-over moved its queued time: not again until another period passes
    assert turns_sweep(stale_s=120) == SweepResult(interrupted=0, requeued=0)
    assert handed == [lost.pk]

    after = {t.pk: t for t in Turn.objects.filter(pk__in=[lost.pk, recent.pk, evaluation.pk])}
    assert {pk: t.status for pk, t in after.items()} == {
        lost.pk: "queued",
        recent.pk: "queued",
        evaluation.pk: "queued",
    }
    assert after[lost.pk].updated_at > lost.updated_at
    assert (after[recent.pk].updated_at, after[evaluation.pk].updated_at) == (
        recent.updated_at,
        evaluation.updated_at,
    )
    assert after[lost.pk].last_seq == lost.last_seq  # nothing was written to its log


async def test_a_lost_turn_is_answered_once_the_sweep_hands_it_over(owner, db_threads):
    use_inline(ScriptedProvider([final("42")]))
    lost = await db_threads.run(queued_turn, owner, age_s=300)

    swept = await db_threads.run(turns_sweep, stale_s=120)

    assert swept == SweepResult(interrupted=0, requeued=1)
    turn = await wait_for_status(db_threads, lost.pk, "succeeded")
    assert (turn.outcome, turn.answer) == ("answered", "42")
    assert (await db_threads.run(types, turn.pk))[-1] == "turn.answered"


# --- resume ------------------------------------------------------------------------------


async def test_resume_and_enqueue_finishes_an_interrupted_turn_without_repeating_tools(owner, db_threads):
    counter: dict[str, int] = {}
    registry = counting_registry(counter, delay=0.5)
    turn = await db_threads.run(turn_create, owner=owner, question="count a, b, c")
    first = jobs.InlineExecutor(
        provider_factory=lambda: ScriptedProvider(
            [
                tool_calls(call("count", {"label": "a"}), call("count", {"label": "b"}), usage=(10, 2)),
                Slow(60, text("never")),
            ]
        ),
        tools_factory=lambda: registry,
        sweep_every_s=0,
    ).start()
    first.submit(turn.pk)
    while counter.get("b") != 1 or (await db_threads.run(types, turn.pk)).count("tool.result") < 2:
        await asyncio.sleep(0.05)
    await asyncio.to_thread(first.stop)  # the process running the turn dies mid-LLM call
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).status == "running"

    await db_threads.run(turn_interrupt, turn_id=turn.pk, reason="worker died")
    second_provider = ScriptedProvider(
        [tool_call("count", {"label": "c"}, usage=(20, 2)), final("3", usage=(5, 1))]
    )
    use_inline(second_provider, registry)
    await db_threads.run(turn_resume_and_enqueue, turn_id=turn.pk)
    turn = await wait_for_status(db_threads, turn.pk, "succeeded")

    assert counter == {"a": 1, "b": 1, "c": 1}
    assert len(second_provider.calls) == 2
    assert turn.answer == "3" and turn.usage["input_tokens"] == 10 + 20 + 5 and turn.usage["calls"] == 3
    events = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.type for e in events]
    assert kinds.count("turn.interrupted") == 1 and kinds.count("turn.resumed") == 1
    assert kinds.count("tool.result") == 4  # a, b, c, final_answer


async def test_resuming_a_running_turn_is_a_conflict(owner, db_threads):
    turn = await db_threads.run(running_turn, owner, heartbeat_age_s=0)
    with pytest.raises(StateConflict):
        await db_threads.run(turn_resume_and_enqueue, turn_id=turn.pk)
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).status == "running"


def dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_local_job_ids_say_whether_their_process_is_gone():
    import os

    mine = ids.local_job_id("inline", 7)
    assert mine.startswith("inline-") and mine.endswith(f"-{os.getpid()}-7")
    host = mine.split("-")[1]
    gone = f"inline-{host}-{dead_pid()}-1"
    # as a claim leaves it in Turn.job_id: the job id, ':' and a random part
    assert ids.local_job_is_gone(f"{gone}:0123abcd") is True
    assert ids.local_job_is_gone(f"{mine}:0123abcd") is False  # this very process
    assert ids.local_job_is_gone(f"inline-{host}-1-1:0123abcd") is False  # pid 1 is alive
    assert ids.local_job_is_gone(f"inline-otherhost-{dead_pid()}-1:0123abcd") is False  # not ours to judge
    assert ids.local_job_is_gone(f"inline-{dead_pid()}-1:0123abcd") is False  # an older id, no host
    assert ids.local_job_is_gone("6f1c1a7e-celery-task-id:0123abcd") is False
    assert ids.local_job_is_gone("") is False


def test_the_sweep_interrupts_at_once_the_turns_of_an_inline_driver_that_exited(owner):
    host = ids.local_job_id("inline", 1).split("-")[1]
    orphan = turn_create(owner=owner, question="q")
    turn_claim(turn_id=orphan.pk, job_id=f"inline-{host}-{dead_pid()}-3")
    alive = turn_create(owner=owner, question="q")
    turn_claim(turn_id=alive.pk, job_id=ids.local_job_id("inline", 4))
    # both heartbeats are fresh: the stale sweep alone would wait TURN_STALE_S

    assert turns_sweep(stale_s=120) == SweepResult(interrupted=1, requeued=0)

    orphan.refresh_from_db(), alive.refresh_from_db()
    assert (orphan.status, alive.status) == ("interrupted", "running")
    last = events_after(turn_id=orphan.pk)[-1]
    assert last.type == "turn.interrupted" and last.data["was"] == "running"
    assert "is gone" in last.data["reason"]


def test_a_cancel_asked_of_a_turn_whose_driver_died_ends_it_cancelled_when_swept(owner, staff):
    stale = running_turn(owner, heartbeat_age_s=300)
    turn_cancel(turn_id=stale.pk, acting_user=staff)  # accepted: the flag is set, but no driver will see it
    stale.refresh_from_db()
    assert (stale.status, stale.cancel_requested) == ("running", True)

    assert turns_sweep_stale(stale_s=120) == 1

    stale.refresh_from_db()
    assert (stale.status, stale.outcome, stale.stop_reason) == ("cancelled", "cancelled", "cancelled")
    assert stale.finished_at is not None
    events = events_after(turn_id=stale.pk)
    assert [e.type for e in events[-2:]] == ["turn.interrupted", "turn.cancelled"]
    assert events[-1].data == {"stop_reason": "cancelled", "steps": 0, "by": staff.username}
    assert [e.seq for e in events] == list(range(1, stale.last_seq + 1))
    with pytest.raises(StateConflict):
        turn_resume_and_enqueue(turn_id=stale.pk, acting_user=owner)  # finished: nothing to resume


def test_sweep_turns_on_an_unmigrated_database_is_exit_2_with_a_hint():
    call_command("migrate", "evaluation", "zero", verbosity=0)
    call_command("migrate", "turns", "zero", verbosity=0)  # as if `migrate` was never run for them
    try:
        with pytest.raises(CommandError) as excinfo:
            call_command("sweep_turns")
    finally:
        call_command("migrate", verbosity=0)
    assert excinfo.value.returncode == 2
    assert "migration(s) not applied: turns.0001_initial" in str(excinfo.value)
    assert "run `manage.py migrate` first" in str(excinfo.value)
