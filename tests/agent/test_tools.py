from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from pydantic import BaseModel

from agentlab.agent.tools import (
    NO_DOCUMENTS,
    CalculatorError,
    Tool,
    ToolContext,
    ToolRegistry,
    default_registry,
    evaluate_expression,
    rank_documents,
)
from agentlab.agent.types import ToolCall, ToolResult

from .conftest import dataset_rows


def _call(name: str, arguments: dict | None = None, **kwargs: object) -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=arguments or {}, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(16 - 3 - 4) * 2", "18"),
        ("36 / 2", "18"),
        ("7 // 2", "3"),
        ("7 % 3", "1"),
        ("2 ** 10", "1024"),
        ("2^3", "8"),
        ("3 × 4 ÷ 2", "6"),
        ("$19.50 / 0.75", "26"),
        ("0.1 + 0.2", "0.3"),
        ("10 / 3", "3.33333333333"),
        ("sqrt(16) + abs(-2)", "6"),
        ("round(2.567, 2)", "2.57"),
        ("min(3, 4) + max(1, 2)", "5"),
        ("-(-5)", "5"),
    ],
)
def test_calculator_does_safe_arithmetic(expression: str, expected: str) -> None:
    assert evaluate_expression(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("(1).real", "Attribute is not allowed"),
        ("().__class__.__bases__", "Attribute is not allowed"),
        ("__import__('os').system('true')", "only these functions are allowed"),
        ("open('/etc/passwd')", "only these functions are allowed"),
        ("'a' * 3", "only numbers are allowed"),
        ("x + 1", "unknown name 'x'"),
        ("[1, 2][0]", "Subscript is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("1 < 2", "Compare is not allowed"),
        ("9 ** 99999", "exponent 99999 too large"),
        ("99 ** 999", "result of 99 ** 999 too large"),
        ("10 ** 400 * 10 ** 400 * 10 ** 400 * 10 ** 400", "result too large"),
        ("10.0 ** 999", "too large"),
        ("1 / 0", "division by zero"),
        ("1; 2", "not an arithmetic expression"),
        ("", "empty expression"),
    ],
)
def test_calculator_refuses_unsafe_or_huge_input(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate_expression(expression)


async def test_calculator_failure_is_an_error_observation() -> None:
    result = await default_registry().execute(_call("calculator", {"expression": "(1).real"}), ToolContext())
    assert result == ToolResult(
        call_id="c1",
        name="calculator",
        output="Tool calculator failed: CalculatorError: "
        "Attribute is not allowed; use numbers, + - * / // % ** and ()",
        is_error=True,
    )


# --------------------------------------------------------------------------- search_documents


def test_bm25_picks_the_right_hotpotqa_document() -> None:
    row = dataset_rows("hotpotqa-dev-distractor-52.jsonl")[0]
    assert row["question"] == "Were Scott Derrickson and Ed Wood of the same nationality?"
    documents = row["context"]["documents"]
    assert len(documents) == 10

    assert [d["title"] for d in rank_documents("Scott Derrickson nationality", documents, 1)] == [
        "Scott Derrickson"
    ]
    assert [d["title"] for d in rank_documents("Ed Wood filmmaker nationality", documents, 2)] == [
        "Ed Wood",
        "Ed Wood (film)",
    ]
    # Both supporting documents are in the top 3 for the question itself.
    assert [d["title"] for d in rank_documents(row["question"], documents, 3)] == [
        "Doctor Strange (2016 film)",
        "Scott Derrickson",
        "Ed Wood",
    ]


async def test_search_documents_tool_returns_top_k_title_and_text() -> None:
    row = dataset_rows("hotpotqa-dev-distractor-52.jsonl")[0]
    context = ToolContext(documents=row["context"]["documents"])
    result = await default_registry().execute(
        _call("search_documents", {"query": "Scott Derrickson", "k": 1}), context
    )
    assert result.is_error is False
    assert json.loads(result.output) == [
        {
            "title": "Scott Derrickson",
            "text": next(d["text"] for d in context.documents if d["title"] == "Scott Derrickson"),
        }
    ]


async def test_search_documents_without_documents_says_so() -> None:
    result = await default_registry().execute(_call("search_documents", {"query": "anything"}), ToolContext())
    assert result == ToolResult(call_id="c1", name="search_documents", output=NO_DOCUMENTS, is_error=False)


async def test_search_documents_k_is_bounded() -> None:
    result = await default_registry().execute(
        _call("search_documents", {"query": "x", "k": 0}), ToolContext()
    )
    assert result.is_error is True
    assert (
        result.output
        == "Invalid arguments for search_documents: k: Input should be greater than or equal to 1"
    )


# --------------------------------------------------------------------------- registry


class EchoArgs(BaseModel):
    value: int


async def test_unknown_tool_is_an_error_result_listing_the_tools() -> None:
    result = await default_registry().execute(_call("web_search", {"q": "x"}), ToolContext())
    assert result == ToolResult(
        call_id="c1",
        name="web_search",
        output="Unknown tool 'web_search'. "
        "Available tools: calculator, search_documents, ask_user, final_answer.",
        is_error=True,
    )


async def test_bad_arguments_from_the_model_are_an_error_result() -> None:
    call = _call("calculator", raw_arguments='{"expression": "2+', error="the arguments are not valid JSON")
    result = await default_registry().execute(call, ToolContext())
    assert result.output == "Invalid arguments for calculator: the arguments are not valid JSON"
    assert result.is_error is True


async def test_validation_failure_names_the_field() -> None:
    result = await default_registry().execute(_call("calculator", {"expr": "1+1"}), ToolContext())
    assert result.output == "Invalid arguments for calculator: expression: Field required"
    assert result.is_error is True


async def test_a_call_without_a_name_is_malformed() -> None:
    result = await default_registry().execute(ToolCall(id="c9", name="", error="not JSON"), ToolContext())
    assert result == ToolResult(call_id="c9", name="", output="Malformed tool call: not JSON", is_error=True)


async def test_a_raising_tool_becomes_an_error_result() -> None:
    def explode(args: EchoArgs, context: ToolContext) -> str:
        raise ValueError("disk full")

    registry = ToolRegistry([Tool(name="explode", description="x", parameters=EchoArgs, fn=explode)])
    result = await registry.execute(_call("explode", {"value": 1}), ToolContext())
    assert result == ToolResult(
        call_id="c1", name="explode", output="Tool explode failed: ValueError: disk full", is_error=True
    )


async def test_non_string_results_are_json_and_async_tools_are_awaited() -> None:
    async def structured(args: EchoArgs, context: ToolContext) -> dict:
        await asyncio.sleep(0)
        return {"value": args.value, "items": ["é", 2], "meta": context.metadata}

    registry = ToolRegistry([Tool(name="structured", description="x", parameters=EchoArgs, fn=structured)])
    result = await registry.execute(_call("structured", {"value": 3}), ToolContext(metadata={"id": "q1"}))
    assert result.output == '{"value": 3, "items": ["é", 2], "meta": {"id": "q1"}}'
    assert result.is_error is False


async def test_sync_tools_run_off_the_event_loop() -> None:
    def slow(args: EchoArgs, context: ToolContext) -> int:
        time.sleep(0.3)
        return args.value

    registry = ToolRegistry([Tool(name="slow", description="x", parameters=EchoArgs, fn=slow)])
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    result = await registry.execute(_call("slow", {"value": 5}), ToolContext())
    task.cancel()
    assert result.output == "5"
    assert ticks >= 10  # the loop kept running while the tool slept


def test_specs_are_openai_function_tools_with_json_schema() -> None:
    registry = default_registry()
    assert registry.names == ["calculator", "search_documents", "ask_user", "final_answer"]
    spec = registry.specs()[0]
    assert spec == {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": registry.get("calculator").description,  # type: ignore[union-attr]
            "parameters": {
                "type": "object",
                "properties": {
                    "expression": {
                        "type": "string",
                        "description": "An arithmetic expression, e.g. '(16 - 3 - 4) * 2'.",
                    }
                },
                "required": ["expression"],
            },
        },
    }
    final = registry.specs()[3]["function"]["parameters"]
    assert final["required"] == ["answer"]
    assert set(final["properties"]) == {"answer", "evidence", "reasoning"}


def test_registering_a_name_twice_is_refused() -> None:
    registry = default_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("calculator"))  # type: ignore[arg-type]
