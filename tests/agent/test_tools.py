from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentlab.agent.protocol import TOOL_HINTS, system_prompt
from agentlab.agent.tools import (
    NO_DATABASE,
    NO_DOCUMENTS,
    SCHEMA_QUERY,
    CalculatorError,
    SQLQueryArgs,
    SQLQueryError,
    Tool,
    ToolContext,
    ToolRegistry,
    ask_user_tool,
    calculator_tool,
    default_registry,
    evaluate_expression,
    final_answer_tool,
    rank_documents,
    search_documents_tool,
    sql_query_tool,
)
from agentlab.agent.types import ToolCall, ToolResult
from tests.shared_data import dataset_path

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
    assert registry.names == ["calculator", "search_documents", "ask_user", "final_answer", "sql_query"]
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


# --------------------------------------------------------------------------- sql_query

CONCERT_SINGER = dataset_path("spider-databases/concert_singer.sqlite")
OLD_TOOLS = ["calculator", "search_documents", "ask_user", "final_answer"]
REFUSED = (
    "Tool sql_query failed: SQLQueryError: refused: sql_query only reads; send one SELECT (or WITH … SELECT)"
)


def _with_database(path: object) -> ToolContext:
    return ToolContext(metadata={"task_type": "sql", "database_path": str(path)})


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def database_copy(tmp_path: Path) -> Path:
    """A writable copy of concert_singer in an empty folder: only the tool's
    own guards stand between a write and the file."""
    path = tmp_path / "concert_singer.sqlite"
    shutil.copyfile(CONCERT_SINGER, path)
    path.chmod(0o644)
    return path


async def test_sql_query_returns_columns_and_rows() -> None:
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT count(*) FROM singer"}), _with_database(CONCERT_SINGER)
    )
    assert result == ToolResult(
        call_id="c1", name="sql_query", output='{"columns": ["count(*)"], "rows": [[6]], "row_count": 1}'
    )


async def test_sql_query_reads_the_schema_from_sqlite_master() -> None:
    result = await default_registry().execute(
        _call("sql_query", {"query": SCHEMA_QUERY}), _with_database(CONCERT_SINGER)
    )
    schema = json.loads(result.output)
    assert (result.is_error, schema["columns"], schema["row_count"]) == (False, ["sql"], 4)
    assert [sql.split("(")[0] for (sql,) in schema["rows"]] == [
        'CREATE TABLE "stadium" ',
        'CREATE TABLE "singer" ',
        'CREATE TABLE "concert" ',
        'CREATE TABLE "singer_in_concert" ',
    ]


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM singer",
        "UPDATE singer SET Age = 0",
        "INSERT INTO singer (Singer_ID) VALUES (99)",
        "CREATE TABLE notes (x)",
        "DROP TABLE singer",
        "ATTACH DATABASE 'attached.sqlite' AS other",
        "VACUUM INTO 'vacuumed.sqlite'",
        "PRAGMA query_only = OFF",
        "BEGIN IMMEDIATE",
    ],
)
async def test_sql_query_refuses_writes_and_leaves_the_file_unchanged(
    database_copy: Path, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(database_copy.parent)  # where ATTACH / VACUUM INTO would create their files
    before = _sha256(database_copy)
    result = await default_registry().execute(
        _call("sql_query", {"query": query}), _with_database(database_copy)
    )
    assert (result.is_error, result.output) == (True, REFUSED)
    assert _sha256(database_copy) == before
    assert sorted(p.name for p in database_copy.parent.iterdir()) == ["concert_singer.sqlite"]
    check = await default_registry().execute(
        _call("sql_query", {"query": "SELECT count(*) FROM singer"}), _with_database(database_copy)
    )
    assert json.loads(check.output)["rows"] == [[6]]


async def test_sql_query_runs_one_statement_only(database_copy: Path) -> None:
    before = _sha256(database_copy)
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT count(*) FROM singer; DELETE FROM singer"}),
        _with_database(database_copy),
    )
    assert result.is_error is True
    assert result.output == (
        "Tool sql_query failed: SQLQueryError: only one statement per call; send the queries one by one"
    )
    assert _sha256(database_copy) == before


async def test_sql_query_stops_a_runaway_query_at_the_time_limit() -> None:
    registry = ToolRegistry([sql_query_tool(time_limit_s=0.3)])
    runaway = (
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 1000000000) "
        "SELECT count(*) FROM n"
    )
    started = time.monotonic()
    result = await registry.execute(_call("sql_query", {"query": runaway}), _with_database(CONCERT_SINGER))
    elapsed = time.monotonic() - started
    assert (result.is_error, result.output) == (
        True,
        (
            "Tool sql_query failed: SQLQueryError: stopped: the query ran longer than the 0.3 s limit; "
            "simplify it or add a LIMIT"
        ),
    )
    assert 0.3 <= elapsed < 2.0  # counting to 10**9 takes minutes


async def test_sql_query_returns_at_most_50_rows_and_counts_the_rest() -> None:
    query = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 120) SELECT x FROM n"
    result = await default_registry().execute(
        _call("sql_query", {"query": query}), _with_database(CONCERT_SINGER)
    )
    assert json.loads(result.output) == {
        "columns": ["x"],
        "rows": [[x] for x in range(1, 51)],
        "row_count": 120,
        "note": "Only the first 50 of 120 rows are shown.",
    }


async def test_sql_query_unknown_table_lists_the_tables() -> None:
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT count(*) FROM singers"}), _with_database(CONCERT_SINGER)
    )
    assert (result.is_error, result.output) == (
        True,
        (
            "Tool sql_query failed: SQLQueryError: no such table: singers (the tables are: concert, "
            "singer, singer_in_concert, stadium; SELECT sql FROM sqlite_master WHERE type = 'table' "
            "shows their columns)"
        ),
    )


async def test_sql_query_without_a_database_is_an_unknown_tool() -> None:
    registry = default_registry()
    result = await registry.execute(_call("sql_query", {"query": "SELECT 1"}), ToolContext())
    assert result == ToolResult(
        call_id="c1",
        name="sql_query",
        output="Unknown tool 'sql_query'. Available tools: "
        "calculator, search_documents, ask_user, final_answer.",
        is_error=True,
    )
    # the function itself, called past the registry, refuses as well
    tool = registry.get("sql_query")
    assert tool is not None
    with pytest.raises(SQLQueryError, match=f"^{re.escape(NO_DATABASE)}$"):
        tool.fn(SQLQueryArgs(query="SELECT 1"), ToolContext())


async def test_sql_query_with_a_missing_database_file_is_an_error_result(tmp_path: Path) -> None:
    missing = tmp_path / "gone.sqlite"
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT 1"}), _with_database(missing)
    )
    assert (result.is_error, result.output) == (
        True,
        f"Tool sql_query failed: SQLQueryError: the database file {missing} does not exist",
    )
    assert not missing.exists()


def test_without_a_database_the_offered_tools_are_exactly_the_old_ones() -> None:
    registry = default_registry()
    old = ToolRegistry([calculator_tool(), search_documents_tool(), ask_user_tool(), final_answer_tool()])
    offered = registry.offered(
        ToolContext(documents=[{"title": "t", "text": "x"}], metadata={"task_type": "math"})
    )
    assert offered.names == OLD_TOOLS
    assert offered.specs() == old.specs()
    for native in (True, False):
        assert system_prompt(offered, native_tools=native) == system_prompt(old, native_tools=native)


def test_with_a_database_sql_query_is_offered_last_with_its_hint() -> None:
    registry = default_registry()
    offered = registry.offered(_with_database(CONCERT_SINGER))
    assert offered is registry
    assert [spec["function"]["name"] for spec in offered.specs()] == [*OLD_TOOLS, "sql_query"]
    assert offered.specs()[4]["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "One SQLite SELECT statement, e.g. 'SELECT count(*) FROM singer'.",
            }
        },
        "required": ["query"],
    }
    assert system_prompt(offered, native_tools=True).endswith("\n" + TOOL_HINTS["sql_query"])


def test_a_registry_without_conditional_tools_offers_itself() -> None:
    registry = ToolRegistry([calculator_tool(), final_answer_tool()])
    assert registry.offered(ToolContext()) is registry
