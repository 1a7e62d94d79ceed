"""The agent loop against the scripted provider: every stop reason, every
malformed case, approvals, cancel/timeout and resume."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from pydantic import BaseModel

from agentlab.agent.loop import AgentLoop, LoopResult
from agentlab.agent.protocol import TOOL_HINTS, system_prompt
from agentlab.agent.providers.scripted import ScriptedProvider, Slow, call, final, text, tool_call, tool_calls
from agentlab.agent.reports import CompletionReport, Report, ToolResultReport, ToolStartReport
from agentlab.agent.tools import Tool, ToolContext, ToolRegistry
from agentlab.agent.types import Completion, ProviderError, Step, ToolCall, ToolResult, Usage
from tests.shared_data import dataset_path

from .conftest import CountArgs, Counter

CONCERT_SINGER = dataset_path("spider-databases/concert_singer.sqlite")
QUESTION = (
    "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4. She sells the rest at $2. How much?"
)


class Recorder:
    """An ``on_report`` that keeps every report, like the driver's event log."""

    def __init__(self) -> None:
        self.reports: list[Report] = []

    async def __call__(self, report: Report) -> None:
        self.reports.append(report)

    def kinds(self) -> list[tuple[str, int, str]]:
        out = []
        for r in self.reports:
            if isinstance(r, CompletionReport):
                out.append(("completion", r.step, ",".join(c.name for c in r.completion.tool_calls)))
            elif isinstance(r, ToolResultReport):
                out.append(("result", r.step, f"{r.call.name}={r.result.output}"))
        return out  # tool starts: see test_a_tool_start_is_reported_before_it_runs_with_its_key


async def run(loop: AgentLoop, question: str = QUESTION, **kwargs: Any) -> tuple[LoopResult, Recorder]:
    recorder = Recorder()
    result = await loop.run(question, on_report=recorder, **kwargs)
    return result, recorder


# --------------------------------------------------------------------------- stop reasons


async def test_final_answer_tool_ends_the_turn(registry: ToolRegistry) -> None:
    provider = ScriptedProvider(
        [
            tool_call("calculator", {"expression": "(16 - 3 - 4) * 2"}, id="c1", usage=(100, 20)),
            final(
                "18", "16 - 3 - 4 = 9 eggs, 9 * $2 = 18", "eggs left times price", id="c2", usage=(130, 30)
            ),
        ]
    )
    result, recorder = await run(AgentLoop(provider, registry))

    assert result.stop_reason == "final"
    assert (result.answer, result.evidence, result.reasoning) == (
        "18",
        "16 - 3 - 4 = 9 eggs, 9 * $2 = 18",
        "eggs left times price",
    )
    assert result.question is None and result.error is None and result.pending_call is None
    assert result.steps_used == 2
    assert result.usage.to_dict()["input_tokens"] == 230
    assert result.usage.to_dict()["output_tokens"] == 50
    assert result.usage.calls == 2
    assert recorder.kinds() == [
        ("completion", 1, "calculator"),
        ("result", 1, "calculator=18"),
        ("completion", 2, "final_answer"),
        ("result", 2, "final_answer=Final answer recorded."),
    ]
    # What the model saw on the second call: its own tool call, then the result.
    second = provider.calls[1]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[1] == {"role": "user", "content": QUESTION}
    assert second[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "(16 - 3 - 4) * 2"}'},
            }
        ],
    }
    assert second[3] == {"role": "tool", "tool_call_id": "c1", "content": "18"}
    assert [t["function"]["name"] for t in provider.tools_seen[0] or []] == [
        "calculator",
        "search_documents",
        "ask_user",
        "final_answer",
        "count",
    ]


async def test_a_reply_without_tool_calls_is_the_final_answer(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([text("  The answer is 18.\n")])
    result, recorder = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "final"
    assert result.answer == "The answer is 18."
    assert (result.evidence, result.reasoning) == ("", "")
    assert result.steps_used == 1
    assert recorder.kinds() == [("completion", 1, "")]


async def test_max_steps_stops_after_that_many_llm_calls(registry: ToolRegistry, counter: Counter) -> None:
    provider = ScriptedProvider(
        [tool_call("count", {"label": "a"}), tool_call("count", {"label": "b"}), final("x")]
    )
    result, recorder = await run(AgentLoop(provider, registry, max_steps=2))
    assert result.stop_reason == "max_steps"
    assert result.error == "no final answer after 2 steps"
    assert result.answer == ""
    assert result.steps_used == 2
    assert len(provider.calls) == 2
    assert counter.runs == ["a", "b"]  # the last step's tools still ran and were reported
    assert recorder.kinds()[-1] == ("result", 2, "count=counted b (2)")


async def test_ask_user_ends_the_turn_with_the_question(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([tool_call("ask_user", {"question": "Which currency?"})])
    result, recorder = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "asked"
    assert result.question == "Which currency?"
    assert result.answer == ""
    assert recorder.kinds() == [
        ("completion", 1, "ask_user"),
        ("result", 1, "ask_user=Asked the user: Which currency?"),
    ]


async def test_context_overflow_stops_with_its_own_reason(registry: ToolRegistry) -> None:
    overflow = ProviderError(
        "HTTP 400: maximum context length is 8192 tokens",
        transient=False,
        kind="context_overflow",
        status=400,
    )
    provider = ScriptedProvider([tool_call("count", {}, usage=(10, 1)), overflow])
    result, _ = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "context_overflow"
    assert result.error == "HTTP 400: maximum context length is 8192 tokens"
    assert result.steps_used == 1
    assert result.usage.calls == 1


async def test_permanent_provider_error_is_not_retried(registry: ToolRegistry) -> None:
    provider = ScriptedProvider(
        [ProviderError("HTTP 401: invalid api key", transient=False, kind="auth"), final("x")]
    )
    result, recorder = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "provider_error"
    assert result.error == "HTTP 401: invalid api key"
    assert len(provider.calls) == 1
    assert result.steps_used == 0
    assert recorder.reports == []


async def test_transient_errors_are_retried_then_give_provider_error(registry: ToolRegistry) -> None:
    busy = ProviderError("HTTP 503: busy", transient=True, kind="server_error", status=503)
    provider = ScriptedProvider([busy, busy, busy, final("x")])
    result, _ = await run(AgentLoop(provider, registry, retry_attempts=3, retry_base_delay=0.001))
    assert result.stop_reason == "provider_error"
    assert result.error == "HTTP 503: busy"
    assert len(provider.calls) == 3

    provider = ScriptedProvider([busy, busy, final("7")])
    result, _ = await run(AgentLoop(provider, registry, retry_attempts=3, retry_base_delay=0.001))
    assert (result.stop_reason, result.answer, len(provider.calls)) == ("final", "7", 3)
    assert result.steps_used == 1  # retries are not steps


async def test_an_unexpected_exception_is_stop_reason_error(registry: ToolRegistry) -> None:
    def broken(messages: list[dict[str, Any]]) -> Completion:
        raise RuntimeError("provider bug")

    provider = ScriptedProvider([tool_call("count", {}), broken])
    result, recorder = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "error"
    assert result.error == "RuntimeError: provider bug"
    assert result.steps_used == 1
    assert [type(r).__name__ for r in recorder.reports] == [
        "CompletionReport",
        "ToolStartReport",
        "ToolResultReport",
    ]


async def test_an_exhausted_script_is_an_error_not_a_hang(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([tool_call("count", {})])
    result, _ = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "error"
    assert result.error == "ScriptExhausted: ScriptedProvider: call 2 but the script has only 1 item(s)"


async def test_an_on_report_failure_propagates(registry: ToolRegistry, counter: Counter) -> None:
    class StoreDown(Exception):
        pass

    async def on_report(report: Report) -> None:
        raise StoreDown("database is gone")

    provider = ScriptedProvider([tool_call("count", {}), final("x")])
    with pytest.raises(StoreDown, match="database is gone"):
        await AgentLoop(provider, registry).run(QUESTION, on_report=on_report)
    assert counter.runs == []  # the step was not recorded, so its tools did not run


# --------------------------------------------------------------------------- approvals


class DeleteArgs(BaseModel):
    path: str


@pytest.fixture
def guarded(registry: ToolRegistry) -> list[str]:
    deleted: list[str] = []

    def delete(args: DeleteArgs, context: ToolContext) -> str:
        deleted.append(args.path)
        return f"deleted {args.path}"

    registry.register(
        Tool(
            name="delete_file",
            description="Delete a file.",
            parameters=DeleteArgs,
            fn=delete,
            needs_approval=True,
        )
    )
    return deleted


async def test_approved_tool_runs(registry: ToolRegistry, guarded: list[str]) -> None:
    asked: list[ToolCall] = []

    async def gate(call: ToolCall) -> str:
        asked.append(call)
        return "approved"

    provider = ScriptedProvider([tool_call("delete_file", {"path": "/tmp/x"}, id="d1"), final("done")])
    result, recorder = await run(AgentLoop(provider, registry), approval=gate)
    assert result.stop_reason == "final"
    assert [c.id for c in asked] == ["d1"]
    assert guarded == ["/tmp/x"]
    assert ("result", 1, "delete_file=deleted /tmp/x") in recorder.kinds()


async def test_rejected_tool_stops_with_approval_rejected(registry: ToolRegistry, guarded: list[str]) -> None:
    async def gate(call: ToolCall) -> str:
        return "rejected"

    provider = ScriptedProvider(
        [
            tool_calls(call("count", {"label": "before"}), call("delete_file", {"path": "/etc"}, id="d1")),
            final("never"),
        ]
    )
    result, recorder = await run(AgentLoop(provider, registry), approval=gate)
    assert result.stop_reason == "approval_rejected"
    assert result.pending_call is not None and result.pending_call.id == "d1"
    assert result.error == "delete_file was rejected"
    assert guarded == []
    assert len(provider.calls) == 1
    assert recorder.kinds() == [
        ("completion", 1, "count,delete_file"),
        ("result", 1, "count=counted before (1)"),
    ]


async def test_no_gate_means_approval_required(registry: ToolRegistry, guarded: list[str]) -> None:
    provider = ScriptedProvider([tool_call("delete_file", {"path": "/etc"}, id="d1"), final("never")])
    result, _ = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "approval_required"
    assert result.pending_call == provider.script[0].tool_calls[0]
    assert guarded == []

    async def gate(call: ToolCall) -> str:
        return "unavailable"

    provider = ScriptedProvider([tool_call("delete_file", {"path": "/etc"}, id="d2")])
    result, _ = await run(AgentLoop(provider, registry), approval=gate)
    assert (result.stop_reason, result.pending_call.id) == ("approval_required", "d2")


# --------------------------------------------------------------------------- cancel and timeout


async def test_cancel_during_an_llm_call_stops_within_a_second(registry: ToolRegistry) -> None:
    # The first call answers at once, the second hangs for 30 s.
    provider = ScriptedProvider([tool_call("count", {}, usage=(11, 2)), Slow(30, final("never"))])
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, cancel.set)
    started = time.monotonic()
    result, recorder = await run(AgentLoop(provider, registry), cancel=cancel)
    elapsed = time.monotonic() - started

    assert result.stop_reason == "cancelled"
    assert elapsed < 1.0
    assert len(provider.calls) == 2
    assert result.steps_used == 1
    assert result.usage.calls == 1 and result.usage.input_tokens == 11  # the finished call is kept
    assert recorder.kinds() == [("completion", 1, "count"), ("result", 1, "count=counted  (1)")]


async def test_cancel_during_a_slow_tool_stops_within_a_second(registry: ToolRegistry) -> None:
    async def sleepy(args: CountArgs, context: ToolContext) -> str:
        await asyncio.sleep(30)
        return "woke"

    registry.register(Tool(name="sleepy", description="x", parameters=CountArgs, fn=sleepy))
    provider = ScriptedProvider([tool_call("sleepy", {}), final("never")])
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, cancel.set)
    started = time.monotonic()
    result, recorder = await run(AgentLoop(provider, registry), cancel=cancel)
    assert result.stop_reason == "cancelled"
    assert time.monotonic() - started < 1.0
    assert result.usage.calls == 1
    assert recorder.kinds() == [("completion", 1, "sleepy")]


async def test_cancel_while_waiting_for_an_approval(registry: ToolRegistry, guarded: list[str]) -> None:
    async def gate(call: ToolCall) -> str:
        await asyncio.sleep(30)
        return "approved"

    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, cancel.set)
    provider = ScriptedProvider([tool_call("delete_file", {"path": "/x"})])
    result, _ = await run(AgentLoop(provider, registry), cancel=cancel, approval=gate)
    assert result.stop_reason == "cancelled"
    assert guarded == []


async def test_cancel_set_before_start_makes_no_call(registry: ToolRegistry) -> None:
    cancel = asyncio.Event()
    cancel.set()
    provider = ScriptedProvider([final("x")])
    result, _ = await run(AgentLoop(provider, registry), cancel=cancel)
    assert (result.stop_reason, result.steps_used, provider.calls) == ("cancelled", 0, [])


async def test_deadline_stops_a_slow_llm_call_with_timeout(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([final("late")], delay=30)
    started = time.monotonic()
    result, _ = await run(AgentLoop(provider, registry), deadline=time.monotonic() + 0.2)
    assert result.stop_reason == "timeout"
    assert result.error == "the turn's deadline passed"
    assert 0.15 < time.monotonic() - started < 1.0
    assert result.usage.calls == 0


async def test_a_passed_deadline_makes_no_call(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([final("x")])
    result, _ = await run(AgentLoop(provider, registry), deadline=time.monotonic() - 1)
    assert (result.stop_reason, provider.calls) == ("timeout", [])


# --------------------------------------------------------------------------- malformed output (native)


async def test_truncated_arguments_are_an_observation_and_echoed_as_valid_json(
    registry: ToolRegistry,
) -> None:
    broken = ToolCall(
        id="c1",
        name="calculator",
        arguments={},
        raw_arguments='{"expression": "2+',
        error="the arguments are not valid JSON (Unterminated string at character 15)",
    )
    provider = ScriptedProvider([Completion(text=None, tool_calls=(broken,), usage=Usage(5, 5)), final("4")])
    result, _ = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "final" and result.answer == "4"
    assert result.steps[0].results == [
        ToolResult(
            call_id="c1",
            name="calculator",
            is_error=True,
            output="Invalid arguments for calculator: "
            "the arguments are not valid JSON (Unterminated string at character 15)",
        )
    ]
    assistant = provider.calls[1][2]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    json.loads(assistant["tool_calls"][0]["function"]["arguments"])


async def test_unknown_tool_and_raising_tool_are_observations(registry: ToolRegistry) -> None:
    def explode(args: CountArgs, context: ToolContext) -> str:
        raise OSError("disk full")

    registry.register(Tool(name="explode", description="x", parameters=CountArgs, fn=explode))
    provider = ScriptedProvider(
        [
            tool_calls(call("web_search", {"q": "eggs"}, id="u1"), call("explode", {}, id="e1")),
            final("18"),
        ]
    )
    result, _ = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "final"
    tool_messages = [m for m in provider.calls[1] if m["role"] == "tool"]
    assert tool_messages == [
        {
            "role": "tool",
            "tool_call_id": "u1",
            "content": "Unknown tool 'web_search'. Available tools: "
            "calculator, search_documents, ask_user, final_answer, count, explode.",
        },
        {"role": "tool", "tool_call_id": "e1", "content": "Tool explode failed: OSError: disk full"},
    ]
    assert [r.is_error for r in result.steps[0].results] == [True, True]


# --------------------------------------------------------------------------- tools offered by context


async def test_sql_query_is_offered_and_runs_only_in_a_turn_with_a_database(registry: ToolRegistry) -> None:
    database = {"task_type": "sql", "database_path": str(CONCERT_SINGER)}
    with_db = ScriptedProvider(
        [tool_call("sql_query", {"query": "SELECT count(*) FROM singer"}, id="q1"), final("[[6]]")]
    )
    result, recorder = await run(
        AgentLoop(with_db, registry), "How many singers do we have?", context=ToolContext(metadata=database)
    )
    assert (result.stop_reason, result.answer) == ("final", "[[6]]")
    assert [t["function"]["name"] for t in with_db.tools_seen[0] or []] == [
        "calculator",
        "search_documents",
        "ask_user",
        "final_answer",
        "sql_query",
        "count",
    ]
    assert with_db.calls[0][0]["content"].endswith(TOOL_HINTS["sql_query"])
    assert recorder.kinds()[1] == (
        "result",
        1,
        'sql_query={"columns": ["count(*)"], "rows": [[6]], "row_count": 1}',
    )

    # the same registry in a turn without a database: the old tools and prompt,
    # and a call of sql_query is an unknown tool
    without = ScriptedProvider([tool_call("sql_query", {"query": "SELECT 1"}, id="q2"), final("6")])
    result, _ = await run(AgentLoop(without, registry), "How many singers do we have?")
    assert [t["function"]["name"] for t in without.tools_seen[0] or []] == [
        "calculator",
        "search_documents",
        "ask_user",
        "final_answer",
        "count",
    ]
    assert "sql_query" not in without.calls[0][0]["content"]
    assert without.calls[1][-1] == {
        "role": "tool",
        "tool_call_id": "q2",
        "content": "Unknown tool 'sql_query'. Available tools: "
        "calculator, search_documents, ask_user, final_answer, count.",
    }


async def test_json_in_text_prompt_lists_sql_query_only_with_a_database(registry: ToolRegistry) -> None:
    loop = AgentLoop(ScriptedProvider([], native_tools=False), registry)
    database = ToolContext(metadata={"database_path": "x.sqlite"})
    plain = loop.build_messages("q", [])[0]["content"]
    with_db = loop.build_messages("q", [], context=database)[0]["content"]
    without_sql = ToolRegistry([t for t in registry if t.name != "sql_query"])
    assert plain == system_prompt(without_sql, native_tools=False)
    assert with_db == system_prompt(registry, native_tools=False)
    assert "sql_query" not in plain
    assert "\n- sql_query: Run one read-only SQL query (SQLite) on the database" in with_db


async def test_invalid_final_answer_does_not_end_the_turn(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([tool_call("final_answer", {"evidence": "no answer"}), final("18")])
    result, _ = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "final" and result.answer == "18"
    assert result.steps[0].results[0].output == "Invalid arguments for final_answer: answer: Field required"
    assert result.steps_used == 2


async def test_structured_answer_fields_are_stored_as_text(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([final(["Paris", "France"], {"doc": "Paris", "sent": 0}, None)])
    result, _ = await run(AgentLoop(provider, registry))
    assert result.answer == '["Paris", "France"]'
    assert result.evidence == '{"doc": "Paris", "sent": 0}'
    assert result.reasoning == ""
    provider = ScriptedProvider([final(18, ["9 eggs", "$2 each"], "9 * 2")])
    result, _ = await run(AgentLoop(provider, registry))
    assert (result.answer, result.evidence, result.reasoning) == ("18", '["9 eggs", "$2 each"]', "9 * 2")


async def test_calls_before_final_answer_run_and_calls_after_it_do_not(
    registry: ToolRegistry, counter: Counter
) -> None:
    provider = ScriptedProvider(
        [
            tool_calls(
                call("count", {"label": "before"}),
                call("final_answer", {"answer": "1"}),
                call("count", {"label": "after"}),
            )
        ]
    )
    result, recorder = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "final" and result.answer == "1"
    assert counter.runs == ["before"]
    assert [k[2] for k in recorder.kinds()[1:]] == [
        "count=counted before (1)",
        "final_answer=Final answer recorded.",
    ]


async def test_missing_usage_is_unknown_not_zero(registry: ToolRegistry) -> None:
    provider = ScriptedProvider([tool_call("count", {}, usage=Usage(None, None)), final("x", usage=(7, 3))])
    result, _ = await run(AgentLoop(provider, registry))
    bucket = {
        "input_tokens": 7,
        "output_tokens": 3,
        "calls": 2,
        "unknown_calls": 1,
        "cost": None,
        "unpriced_calls": 2,
    }
    assert result.usage.to_dict() == {
        **bucket,
        "by_model": {"scripted": bucket},
        "by_role": {"agent": bucket},
    }


# --------------------------------------------------------------------------- JSON-in-text protocol


async def test_json_in_text_with_code_fences_and_prose(registry: ToolRegistry) -> None:
    provider = ScriptedProvider(
        [
            text(
                'Let me compute the eggs left.\n```json\n{"tool": "calculator", "arguments": '
                '{"expression": "16 - 3 - 4"}}\n```\nThen multiply.'
            ),
            text(
                'Now I know. {"tool": "final_answer", "arguments": {"answer": "18", '
                '"evidence": "9 eggs * $2", '
                '"reasoning": "sold eggs times price"}}'
            ),
        ],
        native_tools=False,
        model="small",
    )
    result, recorder = await run(AgentLoop(provider, registry))

    assert result.stop_reason == "final"
    assert (result.answer, result.evidence, result.reasoning) == (
        "18",
        "9 eggs * $2",
        "sold eggs times price",
    )
    assert provider.tools_seen == [None, None]  # tools are described in the prompt instead
    system = provider.calls[0][0]
    assert system["role"] == "system" and "## How to call a tool" in system["content"]
    # The reported completion carries the parsed call with a deterministic id.
    first = recorder.reports[0]
    assert isinstance(first, CompletionReport)
    assert first.completion.tool_calls == (
        ToolCall(
            id="call_1_0",
            name="calculator",
            arguments={"expression": "16 - 3 - 4"},
            raw_arguments='{"expression": "16 - 3 - 4"}',
        ),
    )
    assert provider.calls[1][2:] == [
        {"role": "assistant", "content": provider.script[0].text},
        {"role": "user", "content": "Observation from calculator: 9"},
    ]


async def test_broken_json_in_text_is_an_observation(registry: ToolRegistry) -> None:
    broken = '{"tool": "calculator", "arguments": {"expression": "2+2"'
    provider = ScriptedProvider([text(broken), text("The answer is 4")], native_tools=False)
    result, recorder = await run(AgentLoop(provider, registry))
    assert result.stop_reason == "final" and result.answer == "The answer is 4"
    observation = provider.calls[1][-1]
    assert observation["role"] == "user"
    assert observation["content"] == (
        "Observation from tool call (error): Malformed tool call: your reply looks like a tool call "
        "but is not "
        'valid JSON. Reply with exactly one JSON object like {"tool": "calculator", "arguments": '
        '{"expression": "2 + 2"}}. Your reply was: ' + broken
    )
    assert recorder.kinds()[0] == ("completion", 1, "")
    assert result.steps[0].results[0].is_error is True


async def test_json_in_text_unknown_tool_and_non_object_arguments(registry: ToolRegistry) -> None:
    provider = ScriptedProvider(
        [
            text('{"tool": "web", "arguments": {"q": "x"}}'),
            text('{"tool": "calculator", "arguments": "2+2"}'),
            text("4"),
        ],
        native_tools=False,
    )
    result, _ = await run(AgentLoop(provider, registry))
    assert result.answer == "4"
    assert provider.calls[1][-1]["content"].startswith("Observation from web (error): Unknown tool 'web'.")
    assert provider.calls[2][-1]["content"] == (
        "Observation from calculator (error): Invalid arguments for calculator: "
        "arguments must be a JSON object, "
        'got str: "2+2"'
    )


# --------------------------------------------------------------------------- resume


def _roundtrip(steps: list[Step]) -> list[Step]:
    """What the driver gets back from its event log."""
    return [Step.from_dict(json.loads(json.dumps(s.to_dict()))) for s in steps]


async def test_resume_does_not_repeat_recorded_steps(registry: ToolRegistry, counter: Counter) -> None:
    full = ScriptedProvider(
        [tool_call("count", {"label": "a"}, id="c1", usage=(10, 1)), final("done", id="f1")]
    )
    uninterrupted, _ = await run(AgentLoop(full, registry))
    counter.runs.clear()

    recorded = _roundtrip(uninterrupted.steps[:1])
    resumed_provider = ScriptedProvider([final("done", id="f1", usage=(20, 2))])
    result, recorder = await run(AgentLoop(resumed_provider, registry), recorded=recorded)

    assert result.stop_reason == "final" and result.answer == "done"
    assert len(resumed_provider.calls) == 1  # only the new step was requested
    assert resumed_provider.calls[0] == full.calls[1]  # the same conversation as without the interruption
    assert counter.runs == []  # the recorded tool did not run again
    assert recorder.kinds() == [
        ("completion", 2, "final_answer"),
        ("result", 2, "final_answer=Final answer recorded."),
    ]
    assert result.steps_used == 2
    assert [s.index for s in result.steps] == [1, 2]
    assert (result.usage.calls, result.usage.input_tokens) == (2, 30)  # recorded usage included


async def test_resume_of_a_partial_step_runs_only_the_missing_tool(
    registry: ToolRegistry, counter: Counter
) -> None:
    completion = tool_calls(
        call("count", {"label": "first"}, id="c1"), call("count", {"label": "second"}, id="c2")
    )
    recorded = _roundtrip(
        [
            Step(
                index=1,
                completion=completion,
                results=[
                    ToolResult(call_id="c1", name="count", output="counted first (1)"),
                ],
            )
        ]
    )
    provider = ScriptedProvider([final("2")])
    result, recorder = await run(AgentLoop(provider, registry), recorded=recorded)

    assert counter.runs == ["second"]
    assert recorder.kinds() == [
        ("result", 1, "count=counted second (1)"),
        ("completion", 2, "final_answer"),
        ("result", 2, "final_answer=Final answer recorded."),
    ]
    assert [m for m in provider.calls[0] if m["role"] == "tool"] == [
        {"role": "tool", "tool_call_id": "c1", "content": "counted first (1)"},
        {"role": "tool", "tool_call_id": "c2", "content": "counted second (1)"},
    ]
    assert result.steps[0].results[1].call_id == "c2"
    assert result.steps_used == 2


async def test_a_tool_start_is_reported_before_it_runs_with_its_key(
    registry: ToolRegistry, counter: Counter
) -> None:
    seen: list[tuple[str, str | None, bool]] = []

    async def on_report(report: Report) -> None:
        if isinstance(report, ToolStartReport):
            # reported before the tool ran: its effect is not there yet
            seen.append((report.call.id, report.key, report.repeat))
            assert counter.runs == [] if report.call.id == "c1" else counter.runs == ["first"]

    provider = ScriptedProvider(
        [tool_calls(call("count", {"label": "first"}, id="c1"), call("count", {"label": "again"}, id="c2")),
         final("2", id="f1")]
    )  # fmt: skip
    context = ToolContext(idempotency_scope="turn-7/attempt-1", started_calls=frozenset({"c2"}))
    result = await AgentLoop(provider, registry).run(QUESTION, context=context, on_report=on_report)
    assert result.answer == "2"
    # c2 started before without a result (a crash): run again with the same key, and said so;
    # nothing for final_answer, which ends the turn and has no side effect
    assert seen == [("c1", "turn-7/attempt-1/c1", False), ("c2", "turn-7/attempt-1/c2", True)]


async def test_outside_a_turn_a_tool_gets_no_idempotency_key(registry: ToolRegistry) -> None:
    starts: list[str | None] = []

    async def on_report(report: Report) -> None:
        if isinstance(report, ToolStartReport):
            starts.append(report.key)

    provider = ScriptedProvider([tool_call("count", {"label": "x"}, id="c1"), final("1")])
    await AgentLoop(provider, registry).run(QUESTION, on_report=on_report)
    assert starts == [None]


async def test_resume_of_a_finished_turn_makes_no_call(registry: ToolRegistry) -> None:
    done = _roundtrip(
        [
            Step(
                index=1,
                completion=tool_call("ask_user", {"question": "Which year?"}, id="a1"),
                results=[ToolResult(call_id="a1", name="ask_user", output="Asked the user: Which year?")],
            ),
        ]
    )
    provider = ScriptedProvider([])
    result, recorder = await run(AgentLoop(provider, registry), recorded=done)
    assert (result.stop_reason, result.question) == ("asked", "Which year?")
    assert provider.calls == [] and recorder.reports == []

    answered = _roundtrip(
        [
            Step(
                index=1,
                completion=final(["a", "b"], "ev", id="f1"),
                results=[ToolResult(call_id="f1", name="final_answer", output="ok")],
            )
        ]
    )
    result, recorder = await run(AgentLoop(provider, registry), recorded=answered)
    assert (result.stop_reason, result.answer, result.evidence) == ("final", '["a", "b"]', "ev")
    assert provider.calls == [] and recorder.reports == []
    assert result.usage.calls == 1

    plain = _roundtrip([Step(index=1, completion=text("It is 18."))])
    result, _ = await run(AgentLoop(provider, registry), recorded=plain)
    assert (result.stop_reason, result.answer, provider.calls) == ("final", "It is 18.", [])


async def test_resume_with_an_unrun_final_answer_finishes_without_the_llm(registry: ToolRegistry) -> None:
    recorded = _roundtrip([Step(index=1, completion=final("18", id="f1"))])
    provider = ScriptedProvider([])
    result, recorder = await run(AgentLoop(provider, registry), recorded=recorded)
    assert (result.stop_reason, result.answer) == ("final", "18")
    assert recorder.kinds() == [("result", 1, "final_answer=Final answer recorded.")]
    assert provider.calls == []


async def test_resume_at_max_steps_makes_no_call(registry: ToolRegistry) -> None:
    recorded = _roundtrip(
        [
            Step(
                index=i,
                completion=tool_call("count", {}, id=f"c{i}"),
                results=[ToolResult(call_id=f"c{i}", name="count", output="x")],
            )
            for i in (1, 2)
        ]
    )
    provider = ScriptedProvider([])
    result, _ = await run(AgentLoop(provider, registry, max_steps=2), recorded=recorded)
    assert (result.stop_reason, result.steps_used, provider.calls) == ("max_steps", 2, [])


async def test_resume_json_in_text_rebuilds_the_same_messages(
    registry: ToolRegistry, counter: Counter
) -> None:
    script = [text('{"tool": "count", "arguments": {"label": "x"}}'), text("final words")]
    full = ScriptedProvider(list(script), native_tools=False)
    uninterrupted, _ = await run(AgentLoop(full, registry))
    resumed = ScriptedProvider([script[1]], native_tools=False)
    result, _ = await run(AgentLoop(resumed, registry), recorded=_roundtrip(uninterrupted.steps[:1]))
    assert resumed.calls[0] == full.calls[1]
    assert result.answer == "final words"
    assert counter.runs == ["x"]  # once, in the first run only
