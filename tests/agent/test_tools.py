from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentlab.agent.protocol import TOOL_HINTS, system_prompt
from agentlab.agent.tools import (
    NO_DATABASE,
    NO_DOCUMENTS,
    SCHEMA_QUERY,
    SQL_MAX_QUERY_BYTES,
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
    run_sql_query,
    schema_tool,
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
            "description": registry.get("calculator").description,
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


TOO_BIG = (
    "a value would exceed 1000000 bytes (the limit for one string or blob); "
    "make it smaller or return a count or a substr() instead"
)


def _run_with_a_deadline(query: str, deadline_s: float = 10.0) -> tuple[str, float]:
    """``run_sql_query`` in a daemon thread, so that a regression fails the
    test after ``deadline_s`` instead of holding it for minutes; returns the
    error message and the seconds taken."""
    outcome: dict[str, object] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            outcome["result"] = run_sql_query(CONCERT_SINGER, query)
        except SQLQueryError as exc:
            outcome["error"] = str(exc)
        outcome["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(deadline_s)
    assert not thread.is_alive(), f"{query} still ran after {deadline_s} s"
    assert "result" not in outcome, outcome
    return str(outcome["error"]), float(outcome["elapsed"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT printf('%.*c', 500000000, 'x')",
        "SELECT format('%.*c', 2147483647, 'x')",
        "SELECT zeroblob(300000000)",
        "SELECT randomblob(300000000)",
        "SELECT length(replace(printf('%.*c', 900000, 'x'), 'x', 'xx'))",
        "SELECT printf('%2000000d', 1)",
    ],
)
def test_sql_query_refuses_a_value_over_the_length_limit_at_once(query: str) -> None:
    error, elapsed = _run_with_a_deadline(query)
    assert error == TOO_BIG
    assert elapsed < 5.0  # unbounded, these take seconds to minutes and GBs (the 2 s limit cannot see them)


async def test_sql_query_refuses_a_value_over_the_length_limit_as_a_tool_error() -> None:
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT zeroblob(300000000)"}), _with_database(CONCERT_SINGER)
    )
    assert (result.is_error, result.output) == (True, f"Tool sql_query failed: SQLQueryError: {TOO_BIG}")


async def test_sql_query_refuses_a_query_text_over_its_limit() -> None:
    query = "SELECT '" + "x" * SQL_MAX_QUERY_BYTES + "'"
    result = await default_registry().execute(
        _call("sql_query", {"query": query}), _with_database(CONCERT_SINGER)
    )
    assert (result.is_error, result.output) == (
        True,
        "Tool sql_query failed: SQLQueryError: the query is longer than 100000 bytes; shorten it",
    )


def test_sql_query_printf_still_formats() -> None:
    query = (
        "SELECT printf('%.2f', 3.14159), format('%5d|%-3s|%%', 42, 'a'), printf('%.*c', 3, 'y'), "
        "printf('%.*c', '2', 'z'), printf(NULL), printf('%.1f%%', avg(Age)) FROM singer"
    )
    assert run_sql_query(CONCERT_SINGER, query)["rows"] == [
        ["3.14", "   42|a  |%", "yyy", "zz", None, "37.0%"]
    ]


async def test_sql_query_cuts_a_long_cell_to_1000_characters() -> None:
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT printf('%.*c', 900000, 'x') AS long, x'00ff' AS blob"}),
        _with_database(CONCERT_SINGER),
    )
    assert result.is_error is False
    assert json.loads(result.output) == {
        "columns": ["long", "blob"],
        "rows": [["x" * 1000 + "…[cut: 900000 characters]", "X'00ff'"]],
        "row_count": 1,
    }
    assert len(result.output) == 1097


async def test_sql_query_caps_the_rows_at_20000_characters_of_json_and_says_so() -> None:
    query = (
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 80) "
        "SELECT printf('%.*c', 900, 'x') FROM n"
    )
    result = await default_registry().execute(
        _call("sql_query", {"query": query}), _with_database(CONCERT_SINGER)
    )
    output = json.loads(result.output)
    # each row is ["x…x"] (904 characters) and ", " between rows: 2 + 22 * 904 + 21 * 2 = 19932
    assert output["rows"] == [["x" * 900]] * 22
    assert (output["row_count"], output["note"]) == (
        80,
        (
            "Only the first 22 of 80 rows are shown (the rows are capped at 20000 characters of JSON; "
            "select fewer or shorter columns)."
        ),
    )
    assert len(json.dumps(output["rows"])) == 19932
    assert len(result.output) < 20_500


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("SELECT fts3_tokenizer('simple')", "fts3_tokenizer"),
        ("SELECT hex(FTS3_TOKENIZER('porter'))", "fts3_tokenizer"),
        ("SELECT load_extension('/tmp/x.so')", "load_extension"),
    ],
)
async def test_sql_query_refuses_functions_that_leak_addresses_or_load_code(query: str, name: str) -> None:
    result = await default_registry().execute(
        _call("sql_query", {"query": query}), _with_database(CONCERT_SINGER)
    )
    assert (result.is_error, result.output) == (
        True,
        f"Tool sql_query failed: SQLQueryError: refused: the function {name}() is not available in sql_query",
    )


async def test_sql_query_reads_table_valued_schema_pragmas_only() -> None:
    both = [
        run_sql_query(CONCERT_SINGER, "SELECT name, type, pk FROM pragma_table_info('singer')")["rows"],
        run_sql_query(CONCERT_SINGER, "PRAGMA table_info(singer)")["rows"],
    ]
    assert both[0] == [[name, kind, pk] for _, name, kind, _, _, pk in both[1]]
    assert both[0][:2] == [["Singer_ID", "INT", 1], ["Name", "TEXT", 0]]
    keys = run_sql_query(CONCERT_SINGER, 'SELECT "table", "from" FROM pragma_foreign_key_list(\'concert\')')
    assert keys["rows"] == [["stadium", "Stadium_ID"]]
    result = await default_registry().execute(
        _call("sql_query", {"query": "SELECT name FROM pragma_function_list"}), _with_database(CONCERT_SINGER)
    )
    assert (result.is_error, result.output) == (True, REFUSED)


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
        "Tool sql_query failed: SQLQueryError: the database file gone.sqlite of this question is missing or "
        "not a file",
    )
    assert not missing.exists()


async def test_sql_query_refuses_a_database_path_that_a_link_now_diverts(tmp_path: Path) -> None:
    import shutil

    own = tmp_path / "app.sqlite3"  # stands for AgentLab's own database
    shutil.copy(CONCERT_SINGER, own)
    folder = tmp_path / "dataset"
    folder.mkdir()
    stored = folder / "db.sqlite"
    shutil.copy(CONCERT_SINGER, stored)
    # as a dataset import leaves the context: the resolved file and its folder
    context = ToolContext(
        metadata={"database_path": str(stored.resolve()), "database_root": str(folder.resolve())}
    )
    call = _call("sql_query", {"query": "SELECT count(*) FROM singer"})
    assert json.loads((await default_registry().execute(call, context)).output)["rows"] == [[6]]

    stored.unlink()
    stored.symlink_to(own)  # swapped after the import
    result = await default_registry().execute(call, context)
    assert (result.is_error, result.output) == (
        True,
        "Tool sql_query failed: SQLQueryError: the database file db.sqlite of this question now leads "
        "outside its dataset's folder (a link was put in its place); re-import the dataset",
    )

    stored.unlink()
    stored.symlink_to(folder / "real.sqlite")  # a link that stays inside the folder is fine
    shutil.copy(CONCERT_SINGER, folder / "real.sqlite")
    assert json.loads((await default_registry().execute(call, context)).output)["rows"] == [[6]]


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


def test_sql_query_cuts_long_column_names_and_long_error_messages() -> None:
    name = "n" * 5_000
    result = run_sql_query(CONCERT_SINGER, f'SELECT 1 AS "{name}"')
    assert result["columns"] == [f"{'n' * 1_000}…[cut: 5000 characters]"]
    assert result["rows"] == [[1]]
    with pytest.raises(SQLQueryError) as info:
        run_sql_query(CONCERT_SINGER, f"SELECT {'x' * 5_000} FROM singer")  # SQLite quotes the column back
    message = str(info.value)
    assert message.startswith("no such column: xxx") and message.endswith("characters]")
    assert len(message) < 1_100


def test_with_tools_adds_tools_after_the_registrys_own_and_reuses_its_specs() -> None:
    base = default_registry()
    extra = schema_tool("shout", "Upper-case a text.", {"type": "object", "properties": {}}, lambda a, c: "")

    combined = base.with_tools([extra])

    assert combined.names == [*base.names, "shout"]
    assert combined.specs() == [*base.specs(), extra.spec()]
    assert combined.specs()[0] is base.specs()[0]  # not built again
    with pytest.raises(ValueError, match="a tool named 'calculator' is already registered"):
        base.with_tools([calculator_tool()])
