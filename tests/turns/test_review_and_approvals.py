"""The rest of a turn's life (issue 7): review, one retry on the review's
instruction, continue with more steps, and approvals under the chat and the
evaluation policy — scripted provider, real database."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from django.db import connection
from pydantic import BaseModel

from agentlab.agent.providers.scripted import ScriptedProvider, Slow, call, final, text, tool_call, tool_calls
from agentlab.agent.tools import Tool, default_registry
from agentlab.agent.types import ProviderError
from common.errors import StateConflict
from turns.driver import ChatPolicy, EvaluationPolicy, drive_turn
from turns.driver import lease as lease_module
from turns.driver import review as review_module
from turns.driver.replay import recorded_steps
from turns.jobs.sweep import turns_sweep_stale
from turns.models import Approval, Turn, TurnAttempt
from turns.selectors import events_after
from turns.services import approval_decide, turn_continue, turn_create, turn_resume

pytestmark = pytest.mark.django_db(transaction=True)

REVIEWED_EVAL = EvaluationPolicy(review=True)
ACCEPT = '{"verdict": "accept", "note": "checks out", "retry_instruction": null}'


def archived_attempts(turn_id: int) -> list[TurnAttempt]:
    """The turn's archived attempts, oldest first."""
    return list(TurnAttempt.objects.filter(turn_id=turn_id))


def retry(instruction: str) -> str:
    return json.dumps({"verdict": "retry", "note": "looks wrong", "retry_instruction": instruction})


class _Label(BaseModel):
    label: str


def counting_tools(counter: dict[str, int]):
    """``count`` (no approval) and ``deploy`` (needs approval), both counted."""
    registry = default_registry()
    for name, needs in (("count", False), ("deploy", True)):

        async def fn(args: _Label, _ctx, _name=name) -> str:
            key = f"{_name}:{args.label}"
            counter[key] = counter.get(key, 0) + 1
            return f"{_name} {args.label}"

        registry.register(Tool(name=name, description=name, parameters=_Label, fn=fn, needs_approval=needs))
    return registry


def types(turn_id: int) -> list[str]:
    return [e.type for e in events_after(turn_id=turn_id)]


def events_of(turn_id: int, etype: str):
    return [e for e in events_after(turn_id=turn_id) if e.type == etype]


@pytest.fixture
def fast_poll(monkeypatch):
    monkeypatch.setattr(lease_module, "CANCEL_POLL_S", 0.05)


# --- review ------------------------------------------------------------------------------


async def test_accepted_review_is_recorded_and_its_usage_added(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="What is 6*7?")
    provider = ScriptedProvider(
        [final("42", "6*7", "multiplied", usage=(30, 6)), text(ACCEPT, usage=(40, 9))]
    )
    result = await drive_turn(turn.pk, policy=REVIEWED_EVAL, provider=provider, db=db_threads)

    assert result is not None and (result.status, result.answer) == ("succeeded", "42")
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome, turn.attempts, turn.phase) == ("succeeded", "answered", 1, "finish")
    assert (turn.usage["input_tokens"], turn.usage["output_tokens"], turn.usage["calls"]) == (70, 15, 2)
    assert turn.usage["by_model"]["scripted"]["calls"] == 2
    assert turn.meta["review"]["verdict"] == "accept" and "attempts" not in turn.meta
    assert turn.timings["review_ms"] >= 0
    assert (await db_threads.run(types, turn.pk)) == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "review",
        "phase",
        "turn.answered",
    ]
    [review] = await db_threads.run(events_of, turn.pk, "review")
    assert review.data == {
        "attempt": 1,
        "verdict": "accept",
        "note": "checks out",
        "retry_instruction": None,
        "usage": {
            "model": "scripted",
            "input_tokens": 40,
            "output_tokens": 9,
            "cost": None,
            "finish_reason": "stop",
            "decoding": "free",
        },
        "late": False,
    }
    # the reviewer saw the question, the answer and the trace, with no tools
    reviewer_prompt = provider.calls[1][1]["content"]
    assert (
        "What is 6*7?" in reviewer_prompt
        and "Answer:\n42" in reviewer_prompt
        and "final_answer" in reviewer_prompt
    )
    assert provider.tools_seen[1] is None


async def test_a_retry_that_fixes_the_answer_archives_the_first_attempt(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="What is 6*7?")
    provider = ScriptedProvider(
        [
            final("41", usage=(30, 6)),
            text(retry("multiply again"), usage=(40, 9)),
            final("42", usage=(50, 7)),
            text(ACCEPT, usage=(41, 8)),
        ]
    )
    result = await drive_turn(turn.pk, policy=REVIEWED_EVAL, provider=provider, db=db_threads)

    assert result is not None and result.answer == "42"
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.answer, turn.attempts, turn.steps) == ("succeeded", "42", 2, 1)
    assert (turn.usage["input_tokens"], turn.usage["calls"]) == (91, 2)  # the second attempt's act + review
    [first] = await db_threads.run(archived_attempts, turn.pk)
    assert (first.number, first.ended_by, first.answer, first.outcome, first.stop_reason) == (
        1,
        "review",
        "41",
        "answered",
        "final",
    )
    assert first.usage["input_tokens"] == 70 and first.steps == 1 and len(first.trace) == 1
    assert first.review["verdict"] == "retry" and first.review["retry_instruction"] == "multiply again"
    assert turn.meta["review"]["verdict"] == "accept"
    # the second attempt was asked with the instruction and the previous answer
    second_question = provider.calls[2][1]["content"]
    assert second_question.startswith("What is 6*7?") and "Previous answer: 41" in second_question
    assert "multiply again" in second_question
    assert (await db_threads.run(types, turn.pk)) == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "review",
        "attempt.retry",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "review",
        "phase",
        "turn.answered",
    ]
    [event] = await db_threads.run(events_of, turn.pk, "attempt.retry")
    assert (event.data["attempt"], event.data["reason"], event.data["instruction"]) == (
        2,
        "review",
        "multiply again",
    )
    # steps are tagged by attempt, so each attempt rebuilds on its own
    steps2 = await db_threads.run(recorded_steps, turn_id=turn.pk, attempt=2)
    steps1 = await db_threads.run(recorded_steps, turn_id=turn.pk, attempt=1)
    assert [s.completion.tool_calls[0].arguments["answer"] for s in steps1 + steps2] == ["41", "42"]


async def test_a_retry_that_breaks_the_answer_keeps_the_last_and_retries_only_once(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="What is 6*7?")
    provider = ScriptedProvider(
        [
            final("42"),
            text(retry("double-check")),
            final("41"),
            text(retry("try yet again")),
        ]
    )
    result = await drive_turn(turn.pk, policy=REVIEWED_EVAL, provider=provider, db=db_threads)
    assert result is not None and result.answer == "41"
    assert provider.remaining == 0  # no third attempt although the second review said retry too
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    archived = await db_threads.run(archived_attempts, turn.pk)
    assert (turn.answer, turn.attempts, [a.answer for a in archived]) == ("41", 2, ["42"])
    assert len(await db_threads.run(events_of, turn.pk, "attempt.retry")) == 1
    assert [e.data["verdict"] for e in await db_threads.run(events_of, turn.pk, "review")] == [
        "retry",
        "retry",
    ]


async def test_a_reviewer_error_is_a_failed_review_and_the_turn_still_answers(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([final("42", usage=(30, 6)), ProviderError("quota", transient=False)])
    result = await drive_turn(turn.pk, policy=REVIEWED_EVAL, provider=provider, db=db_threads)
    assert result is not None and (result.status, result.answer) == ("succeeded", "42")
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.outcome, turn.usage["calls"]) == ("answered", 1)
    [review] = await db_threads.run(events_of, turn.pk, "review")
    assert (review.data["verdict"], review.data["usage"], review.data["late"]) == ("failed", None, False)
    assert "quota" in review.data["error"]


async def test_no_review_keeps_the_old_event_sequence(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([final("42")])
    await drive_turn(turn.pk, policy=EvaluationPolicy(review=False), provider=provider, db=db_threads)
    assert (await db_threads.run(types, turn.pk)) == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "turn.answered",
    ]


async def test_a_late_chat_review_finishes_the_turn_and_arrives_later_with_its_usage(
    owner, db_threads, settings
):
    settings.AGENTLAB_REVIEW = True
    settings.REVIEW_WAIT_S = 0.3
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    provider = ScriptedProvider([final("42", usage=(30, 6)), Slow(1.5, text(ACCEPT, usage=(40, 9)))])
    started = time.monotonic()
    task = asyncio.create_task(drive_turn(turn.pk, policy=ChatPolicy(), provider=provider, db=db_threads))
    while (await db_threads.run(Turn.objects.get, pk=turn.pk)).status != "succeeded":
        await asyncio.sleep(0.02)
    finished_after = time.monotonic() - started
    assert 0.3 <= finished_after < 1.2  # at the wait limit, not when the review came
    finished = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert finished.usage["calls"] == 1 and "review" not in finished.meta
    assert (await db_threads.run(types, turn.pk))[-3:] == ["phase", "phase", "turn.answered"]

    result = await asyncio.wait_for(task, timeout=5)
    assert result is not None and result.answer == "42"
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    events = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.type for e in events][-4:] == ["phase", "phase", "turn.answered", "review"]
    late = events[-1]
    assert late.seq == turn.last_seq and late.data["late"] is True and late.data["verdict"] == "accept"
    assert late.data["usage"] == {
        "model": "scripted",
        "input_tokens": 40,
        "output_tokens": 9,
        "cost": None,
        "finish_reason": "stop",
        "decoding": "free",
    }
    assert (turn.status, turn.usage["input_tokens"], turn.usage["output_tokens"], turn.usage["calls"]) == (
        "succeeded",
        70,
        15,
        2,
    )
    assert turn.meta["review"]["late"] is True
    # written at most once
    assert not await db_threads.run(
        review_module.review_append_late, turn_id=turn.pk, attempt=1, data=late.data, completion=None
    )


# --- continue with more steps -------------------------------------------------------------


async def test_continue_after_max_steps_reuses_the_recorded_steps(owner, db_threads):
    counter: dict[str, int] = {}
    tools = counting_tools(counter)
    turn = await db_threads.run(turn_create, owner=owner, question="count", max_steps=2)
    first = ScriptedProvider(
        [tool_call("count", {"label": "a"}, usage=(5, 1)), tool_call("count", {"label": "b"}, usage=(6, 1))]
    )
    result = await drive_turn(
        turn.pk, policy=EvaluationPolicy(review=False), provider=first, db=db_threads, tools=tools
    )
    assert result is not None and result.stop_reason == "max_steps"

    turn = await db_threads.run(turn_continue, turn_id=turn.pk, extra_steps=2, acting_user=owner)
    assert (turn.status, turn.attempts, turn.max_steps) == ("queued", 2, 4)
    second = ScriptedProvider([final("done", usage=(9, 2))])
    result = await drive_turn(
        turn.pk, policy=EvaluationPolicy(review=False), provider=second, db=db_threads, tools=tools
    )
    assert result is not None and (result.status, result.answer) == ("succeeded", "done")
    assert counter == {"count:a": 1, "count:b": 1} and len(second.calls) == 1
    assert [m["role"] for m in second.calls[0]].count("tool") == 2  # built on the recorded steps
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.steps, turn.attempts, turn.usage["calls"], turn.usage["input_tokens"]) == (3, 2, 1, 9)
    [archived] = await db_threads.run(archived_attempts, turn.pk)
    assert (archived.ended_by, archived.stop_reason, archived.usage["input_tokens"]) == (
        "continue",
        "max_steps",
        11,
    )
    [event] = await db_threads.run(events_of, turn.pk, "attempt.retry")
    assert (event.data["reason"], event.data["extra_steps"], event.data["max_steps"]) == ("continue", 2, 4)
    # the step of the new attempt is numbered after the old ones
    assert [s.index for s in await db_threads.run(recorded_steps, turn_id=turn.pk, attempt=2)] == [3]


async def test_continue_only_after_max_steps(owner, db_threads):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    await drive_turn(
        turn.pk, policy=EvaluationPolicy(review=False), provider=ScriptedProvider([final("1")]), db=db_threads
    )
    with pytest.raises(StateConflict):
        await db_threads.run(turn_continue, turn_id=turn.pk, extra_steps=2)
    with pytest.raises(ValueError):
        await db_threads.run(turn_continue, turn_id=turn.pk, extra_steps=0)


# --- approvals (chat) ---------------------------------------------------------------------


async def _wait_for_approval(db_threads, turn_id: int) -> Approval:
    for _ in range(200):
        approval = await db_threads.run(lambda: Approval.objects.filter(turn_id=turn_id).first())
        turn = await db_threads.run(Turn.objects.get, pk=turn_id)
        if approval is not None and turn.status == "waiting":
            return approval
        await asyncio.sleep(0.02)
    raise AssertionError("no approval was requested")


async def test_approve_runs_the_tool_and_continues(owner, db_threads, fast_poll):
    counter: dict[str, int] = {}
    turn = await db_threads.run(turn_create, owner=owner, question="deploy x")
    provider = ScriptedProvider([tool_call("deploy", {"label": "x"}, id="call_dep"), final("deployed")])
    task = asyncio.create_task(
        drive_turn(
            turn.pk, policy=ChatPolicy(), provider=provider, db=db_threads, tools=counting_tools(counter)
        )
    )
    approval = await _wait_for_approval(db_threads, turn.pk)
    assert (approval.status, approval.tool_call["id"], approval.deadline) == ("pending", "call_dep", None)
    assert counter == {}
    await asyncio.sleep(0.2)  # still waiting: heartbeats go on, nothing runs
    waiting = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert waiting.status == "waiting" and counter == {}

    await db_threads.run(approval_decide, approval_id=approval.pk, approve=True, acting_user=owner)
    result = await asyncio.wait_for(task, timeout=5)
    assert result is not None and (result.status, result.answer) == ("succeeded", "deployed")
    assert counter == {"deploy:x": 1}
    evs = await db_threads.run(events_after, turn_id=turn.pk)
    assert [e.type for e in evs] == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "approval.requested",
        "approval.resolved",
        "tool.started",
        "tool.result",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "turn.answered",
    ]
    requested = evs[5].data
    assert requested == {"approval_id": approval.pk, "call": requested["call"], "deadline": None}
    assert requested["call"]["id"] == "call_dep"
    assert evs[6].data == {"approval_id": approval.pk, "status": "approved", "by": "owner", "tool": "deploy"}


async def test_reject_ends_the_turn_as_rejected_without_running_the_tool(owner, db_threads, fast_poll):
    counter: dict[str, int] = {}
    turn = await db_threads.run(turn_create, owner=owner, question="deploy x")
    provider = ScriptedProvider([tool_call("deploy", {"label": "x"})])
    task = asyncio.create_task(
        drive_turn(
            turn.pk, policy=ChatPolicy(), provider=provider, db=db_threads, tools=counting_tools(counter)
        )
    )
    approval = await _wait_for_approval(db_threads, turn.pk)
    await db_threads.run(approval_decide, approval_id=approval.pk, approve=False, acting_user=owner)
    result = await asyncio.wait_for(task, timeout=5)
    assert result is not None and result.stop_reason == "approval_rejected"
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome, turn.stop_reason) == ("cancelled", "rejected", "approval_rejected")
    assert counter == {}
    assert (await db_threads.run(types, turn.pk))[-4:] == [
        "approval.requested",
        "approval.resolved",
        "phase",
        "turn.cancelled",
    ]
    # reject then approve: 409, nothing changes
    with pytest.raises(StateConflict):
        await db_threads.run(approval_decide, approval_id=approval.pk, approve=True, acting_user=owner)
    assert (await db_threads.run(Approval.objects.get, pk=approval.pk)).status == "rejected"
    assert len(await db_threads.run(events_of, turn.pk, "approval.resolved")) == 1


async def test_two_concurrent_approvals_one_wins_one_conflicts(owner, teammate, db_threads, fast_poll):
    counter: dict[str, int] = {}
    turn = await db_threads.run(turn_create, owner=owner, question="deploy x")
    provider = ScriptedProvider([tool_call("deploy", {"label": "x"}), final("ok")])
    task = asyncio.create_task(
        drive_turn(
            turn.pk, policy=ChatPolicy(), provider=provider, db=db_threads, tools=counting_tools(counter)
        )
    )
    approval = await _wait_for_approval(db_threads, turn.pk)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def decide(user, approve: bool) -> None:
        barrier.wait()
        try:
            approval_decide(approval_id=approval.pk, approve=approve, acting_user=user)
            outcomes.append("won")
        except StateConflict:
            outcomes.append("409")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(owner, True)),
        threading.Thread(target=decide, args=(teammate, True)),
    ]
    await asyncio.to_thread(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    assert sorted(outcomes) == ["409", "won"]
    result = await asyncio.wait_for(task, timeout=5)
    assert result is not None and result.answer == "ok" and counter == {"deploy:x": 1}
    assert len(await db_threads.run(events_of, turn.pk, "approval.resolved")) == 1


async def test_an_expired_approval_takes_the_reject_path_and_a_late_decision_is_409(
    owner, db_threads, settings, fast_poll
):
    settings.APPROVAL_TIMEOUT_S = 0.3
    counter: dict[str, int] = {}
    turn = await db_threads.run(turn_create, owner=owner, question="deploy x")
    provider = ScriptedProvider([tool_call("deploy", {"label": "x"})])
    result = await asyncio.wait_for(
        drive_turn(
            turn.pk, policy=ChatPolicy(), provider=provider, db=db_threads, tools=counting_tools(counter)
        ),
        timeout=5,
    )
    assert result is not None and result.stop_reason == "approval_rejected" and counter == {}
    turn = await db_threads.run(Turn.objects.get, pk=turn.pk)
    assert (turn.status, turn.outcome) == ("cancelled", "rejected")
    approval = await db_threads.run(Approval.objects.get, turn_id=turn.pk)
    assert approval.status == "expired" and approval.deadline is not None
    [resolved] = await db_threads.run(events_of, turn.pk, "approval.resolved")
    assert resolved.data == {"approval_id": approval.pk, "status": "expired", "by": None, "tool": "deploy"}
    assert (await db_threads.run(events_after, turn_id=turn.pk))[-1].data["reason"] == "the approval expired"
    with pytest.raises(StateConflict):
        await db_threads.run(approval_decide, approval_id=approval.pk, approve=True, acting_user=owner)
    assert len(await db_threads.run(events_of, turn.pk, "approval.resolved")) == 1


async def test_restart_while_waiting_then_approve_runs_nothing_twice(owner, db_threads, fast_poll):
    counter: dict[str, int] = {}
    tools = counting_tools(counter)
    turn = await db_threads.run(turn_create, owner=owner, question="count then deploy")
    first = ScriptedProvider(
        [
            tool_calls(
                call("count", {"label": "a"}), call("deploy", {"label": "x"}, id="call_dep2"), usage=(8, 2)
            ),
        ]
    )
    worker = asyncio.create_task(
        drive_turn(turn.pk, policy=ChatPolicy(), provider=first, db=db_threads, tools=tools)
    )
    approval = await _wait_for_approval(db_threads, turn.pk)
    assert counter == {"count:a": 1}
    worker.cancel()  # the worker dies while the turn waits
    with pytest.raises(asyncio.CancelledError):
        await worker
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).status == "waiting"
    assert await db_threads.run(turns_sweep_stale, stale_s=0) == 1
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).status == "interrupted"

    await db_threads.run(approval_decide, approval_id=approval.pk, approve=True, acting_user=owner)
    await db_threads.run(turn_resume, turn_id=turn.pk)
    second = ScriptedProvider([final("done", usage=(9, 2))])
    result = await asyncio.wait_for(
        drive_turn(turn.pk, policy=ChatPolicy(), provider=second, db=db_threads, tools=tools), timeout=5
    )
    assert result is not None and (result.status, result.answer) == ("succeeded", "done")
    assert counter == {"count:a": 1, "deploy:x": 1}  # nothing ran twice
    assert len(second.calls) == 1  # the recorded step was not asked again
    assert await db_threads.run(Approval.objects.filter(turn_id=turn.pk).count) == 1
    evs = await db_threads.run(types, turn.pk)
    assert evs == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.call",
        "tool.started",
        "tool.result",
        "approval.requested",
        "turn.interrupted",
        "approval.resolved",
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
    assert evs.count("approval.resolved") == 1


async def test_cancel_while_waiting_for_an_approval(owner, db_threads, fast_poll):
    from turns.services import turn_cancel

    turn = await db_threads.run(turn_create, owner=owner, question="deploy x")
    provider = ScriptedProvider([tool_call("deploy", {"label": "x"})])
    task = asyncio.create_task(
        drive_turn(turn.pk, policy=ChatPolicy(), provider=provider, db=db_threads, tools=counting_tools({}))
    )
    await _wait_for_approval(db_threads, turn.pk)
    await db_threads.run(turn_cancel, turn_id=turn.pk, acting_user=owner)
    result = await asyncio.wait_for(task, timeout=5)
    assert result is not None and result.stop_reason == "cancelled"
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).outcome == "cancelled"
    # the approval left pending by the cancel can no longer be decided
    from common.errors import StateConflict
    from turns.models import Approval
    from turns.services import approval_decide

    approval = await db_threads.run(Approval.objects.get, turn_id=turn.pk)
    last_seq = (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq
    with pytest.raises(StateConflict, match="its turn has finished"):
        await db_threads.run(approval_decide, approval_id=approval.pk, approve=True, acting_user=owner)
    assert (await db_threads.run(Turn.objects.get, pk=turn.pk)).last_seq == last_seq


async def test_continue_through_the_api_and_409_when_not_max_steps(owner, db_threads):
    from tests.api_support import ApiClient, assert_error
    from turns.services import conversation_create

    conversation = await db_threads.run(conversation_create, owner=owner, title="c")
    turn = await db_threads.run(
        turn_create, owner=owner, question="q", max_steps=1, conversation=conversation
    )
    await drive_turn(
        turn.pk,
        policy=EvaluationPolicy(review=False),
        db=db_threads,
        provider=ScriptedProvider([tool_call("calculator", {"expression": "1"})]),
    )

    def post(payload):
        return ApiClient(owner).post(f"/api/turns/{turn.pk}/continue", payload)

    assert (await db_threads.run(post, {"extra_steps": 0})).status_code == 422
    response = await db_threads.run(post, {"extra_steps": 3})
    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["attempts"], body["max_steps"]) == ("queued", 2, 4)
    await db_threads.run(lambda: assert_error(post({"extra_steps": 3}), 409, "state_conflict"))
