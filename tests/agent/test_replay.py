"""The agent loop with a replay script (``agentlab.agent.replay``): recorded
results served while the agent follows the recorded path, the divergence
reported, read-only tools live after it, any other tool stopped; the
``count`` tool's ``Counter`` proves what really ran. No Django."""

from __future__ import annotations

from typing import Any

from agentlab.agent.loop import AgentLoop
from agentlab.agent.providers.scripted import ScriptedProvider, final, tool_call
from agentlab.agent.replay import RecordedCall, ReplayScript
from agentlab.agent.reports import DivergenceReport, Report, ToolResultReport, ToolStartReport
from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import ToolCall

from .conftest import Counter

RECORDED = [
    RecordedCall("calculator", {"expression": "6*7"}, "42"),
    RecordedCall("count", {"label": "a"}, "counted a (1)"),
]


async def _run(registry: ToolRegistry, replies: list[Any], script: ReplayScript, **kwargs: Any):
    reports: list[Report] = []

    async def on_report(report: Report) -> None:
        reports.append(report)

    loop = AgentLoop(ScriptedProvider(replies), registry, max_steps=6)
    result = await loop.run("What is 6*7?", on_report=on_report, replay=script, **kwargs)
    return result, reports


async def test_the_recorded_path_followed_is_served_with_no_tool_run(registry, counter: Counter):
    replies = [
        tool_call("calculator", {"expression": "6*7"}),
        tool_call("count", {"label": "a"}),
        final("42"),
    ]
    result, reports = await _run(registry, replies, ReplayScript(RECORDED))

    assert (result.stop_reason, result.answer) == ("final", "42")
    assert counter.runs == []
    assert not any(isinstance(r, ToolStartReport | DivergenceReport) for r in reports)
    served = [r for r in reports if isinstance(r, ToolResultReport) and r.replayed]
    assert [(r.result.name, r.result.output) for r in served] == [
        ("calculator", "42"),
        ("count", "counted a (1)"),
    ]


async def test_another_call_ends_the_turn_at_the_divergence_without_running_it(registry, counter: Counter):
    replies = [tool_call("calculator", {"expression": "6*7"}), tool_call("count", {"label": "b"})]
    script = ReplayScript(RECORDED)
    result, reports = await _run(registry, replies, script)

    assert result.stop_reason == "replay_diverged" and counter.runs == []
    assert result.error == (
        'diverged at step 2: asked for count({"label": "b"}), the recorded turn called count({"label": "a"})'
    )
    (divergence,) = [r for r in reports if isinstance(r, DivergenceReport)]
    assert (divergence.step, divergence.position) == (2, 2)
    assert divergence.recorded == {"name": "count", "arguments": {"label": "a"}}
    assert divergence.call.arguments == {"label": "b"}


async def test_live_after_the_divergence_runs_read_only_tools_and_stops_the_others(
    registry, counter: Counter
):
    replies = [
        tool_call("calculator", {"expression": "1+1"}),  # diverges at once; calculator is read-only
        tool_call("count", {"label": "c"}),
    ]
    result, reports = await _run(registry, replies, ReplayScript(RECORDED, live=True))

    assert result.stop_reason == "replay_unsafe" and counter.runs == []
    assert result.pending_call is not None and result.pending_call.name == "count"
    ran = [r.result.output for r in reports if isinstance(r, ToolResultReport) and not r.replayed]
    assert ran == ["2"]  # calculator ran live
    assert len([r for r in reports if isinstance(r, DivergenceReport)]) == 1


async def test_a_final_answer_before_the_recorded_path_ends_is_a_divergence_that_answers(registry, counter):
    replies = [tool_call("calculator", {"expression": "6*7"}), final("42")]
    result, reports = await _run(registry, replies, ReplayScript(RECORDED))

    assert (result.stop_reason, result.answer) == ("final", "42")
    (divergence,) = [r for r in reports if isinstance(r, DivergenceReport)]
    assert (divergence.position, divergence.call.name) == (2, "final_answer")


def test_a_resumed_script_advances_past_the_recorded_steps_calls_with_results():
    from agentlab.agent.tools import default_registry
    from agentlab.agent.types import Completion, Step, ToolResult, Usage

    call = ToolCall(id="c1", name="calculator", arguments={"expression": "6*7"})
    steps = [
        Step(
            index=1,
            completion=Completion(text=None, tool_calls=(call,), usage=Usage(1, 1), model="m"),
            results=[ToolResult(call_id="c1", name="calculator", output="42")],
        )
    ]
    script = ReplayScript(RECORDED)
    script.resume(steps, calls_of=lambda step: list(step.completion.tool_calls), tools=default_registry())

    assert (script.position, script.divergence) == (1, None)
    decision = script.decide(ToolCall(id="c2", name="count", arguments={"label": "a"}), None, step=2)
    assert decision.action == "serve" and decision.result is not None
    assert decision.result.output == "counted a (1)"
