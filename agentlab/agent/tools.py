"""Tools the agent can call: a registry and the built-in tools.

A tool is a name, a description, a pydantic model for its arguments (which
gives the JSON schema sent to the model) and a function
``fn(args, context) -> value`` (sync or async). ``ToolRegistry.execute`` never
raises for anything the model or the tool did wrong: an unknown tool, bad
arguments or an exception in the tool all come back as a
``ToolResult(is_error=True)`` whose text tells the model what to fix — a tool's
failure is data for the model (STYLE.md §10; inspect_ai ``ToolError``).

A tool may be offered only in some turns: ``Tool.available(context)`` decides.
The loop sends the model only the tools of ``ToolRegistry.offered(context)``
(specs and, without native tools, the system prompt), and ``execute`` answers a
call of an unavailable tool as it answers an unknown one. A turn in which every
tool is available sees the registry itself, exactly as before.

Built in (``default_registry``): ``calculator``, ``search_documents``,
``ask_user``, ``final_answer`` — offered in every turn — and ``sql_query``
(one read-only query on the turn's SQLite database), offered only when the
turn's context has a ``database_path``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import math
import operator
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from rank_bm25 import BM25Okapi
from simpleeval import SimpleEval

from agentlab.agent.types import ToolCall, ToolResult


@dataclass
class ToolContext:
    """What tools may read about the current turn.

    ``documents``: the example's context documents, each ``{"title": str,
    "text": str}`` (searched by ``search_documents``). ``metadata``: free-form
    values from the driver — the turn's context object; for an SQL example
    ``metadata["database_path"]`` is the absolute path of its SQLite file
    (``evaluation.datasets`` resolves ``context.database_file``), which both
    offers and feeds ``sql_query``.
    """

    documents: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


ToolFn = Callable[[Any, ToolContext], "Any | Awaitable[Any]"]


@dataclass
class Tool:
    """One named tool.

    ``parameters`` is a pydantic model; the model's arguments are validated
    against it and ``fn`` receives the validated instance. ``fn`` may be sync
    (run in a worker thread so it cannot block the event loop) or async. A
    return value that is not ``str`` is sent to the model as JSON.
    ``needs_approval`` makes the loop ask the approval gate before running it.
    ``ends_turn``: ``"final"`` (the call's arguments are the answer) or
    ``"ask"`` (the call's ``question`` goes to the user); the turn ends after
    the tool ran without error. ``available``: a predicate over the turn's
    ``ToolContext``; when it says no, the tool is not offered to the model in
    that turn and a call of it is an unknown tool (``None``: always offered).
    It is called once per LLM call and per tool call, so keep it cheap.
    """

    name: str
    description: str
    parameters: type[BaseModel]
    fn: ToolFn
    needs_approval: bool = False
    ends_turn: Literal["final", "ask"] | None = None
    available: Callable[[ToolContext], bool] | None = None

    def is_available(self, context: ToolContext) -> bool:
        """Whether this tool is offered in a turn with ``context``."""
        return self.available is None or bool(self.available(context))

    def spec(self) -> dict[str, Any]:
        """The OpenAI function-tool spec: ``{"type": "function", "function":
        {"name", "description", "parameters": <JSON schema>}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json_schema(self.parameters),
            },
        }


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The pydantic JSON schema of ``model`` without the noise of ``title``
    keys (they only repeat the field names and cost the model tokens)."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                # "title" as a key of a schema node is noise; a *property* named
                # title (inside "properties") must stay.
                if not (k == "title" and isinstance(v, str))
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    schema: dict[str, Any] = strip(model.model_json_schema())
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _to_output(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class ToolRegistry:
    """Named tools, their specs for the model, and safe execution."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: list[dict[str, Any]] | None = None
        for tool in tools or ():
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``; a second tool with the same name is a ``ValueError``."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._specs = None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """OpenAI function-tool specs of every tool, in registration order.

        Built once per registry (pydantic's JSON-schema generation is slow
        enough to show in ``run_eval`` profiles) and rebuilt after
        ``register``. Callers must not mutate the returned list."""
        if self._specs is None:
            self._specs = [tool.spec() for tool in self._tools.values()]
        return self._specs

    def offered(self, context: ToolContext) -> ToolRegistry:
        """The tools offered in a turn with ``context``: those whose
        ``Tool.is_available(context)`` holds, in registration order.

        Returns ``self`` when every tool is available, so such a turn gets
        this registry's own specs and system prompt. Otherwise a new registry
        of the available tools whose specs are taken from this registry's
        (built once), not rebuilt."""
        tools = list(self._tools.values())
        kept = [tool for tool in tools if tool.is_available(context)]
        if len(kept) == len(tools):
            return self
        subset = ToolRegistry(kept)
        specs = dict(zip(self._tools, self.specs(), strict=True))
        subset._specs = [specs[tool.name] for tool in kept]
        return subset

    async def execute(self, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run ``call`` and return its observation; never raises except
        ``asyncio.CancelledError``.

        Error results (``is_error=True``): a call without a tool name (the
        JSON-in-text parser could not read the request), an unknown tool or
        one not available in ``context`` (the same message, listing the tools
        available in ``context``), arguments that were not a JSON object
        (``call.error``), arguments that fail validation, and an exception
        raised by the tool.
        """

        def error(message: str) -> ToolResult:
            return ToolResult(call_id=call.id, name=call.name, output=message, is_error=True)

        if not call.name:
            return error(f"Malformed tool call: {call.error or 'no tool name given'}")
        tool = self._tools.get(call.name)
        if tool is None or not tool.is_available(context):
            names = [t.name for t in self._tools.values() if t.is_available(context)]
            return error(f"Unknown tool {call.name!r}. Available tools: {', '.join(names)}.")
        if call.error:
            return error(f"Invalid arguments for {tool.name}: {call.error}")
        try:
            args = tool.parameters.model_validate(call.arguments)
        except ValidationError as exc:
            return error(f"Invalid arguments for {tool.name}: {_validation_message(exc)}")
        try:
            if inspect.iscoroutinefunction(tool.fn):
                value = await tool.fn(args, context)
            else:
                value = await asyncio.to_thread(tool.fn, args, context)
                if inspect.isawaitable(value):
                    value = await value
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's failure is data for the model
            detail = str(exc) or type(exc).__name__
            return error(f"Tool {tool.name} failed: {type(exc).__name__}: {detail}")
        return ToolResult(call_id=call.id, name=tool.name, output=_to_output(value))


# --------------------------------------------------------------------------- calculator

_MAX_EXPRESSION_CHARS = 500
_MAX_EXPONENT = 1000
_MAX_RESULT_BITS = 4096


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed."""


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > _MAX_RESULT_BITS:
        raise CalculatorError(f"result too large (more than {_MAX_RESULT_BITS} bits)")
    return value


def _safe_pow(base: Any, exponent: Any) -> Any:
    if abs(exponent) > _MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} too large (the limit is {_MAX_EXPONENT})")
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and abs(base) > 1
        and abs(base).bit_length() * exponent > _MAX_RESULT_BITS
    ):
        raise CalculatorError(f"result of {base} ** {exponent} too large")
    try:
        return _check_size(operator.pow(base, exponent))
    except OverflowError as exc:
        raise CalculatorError(f"result of {base} ** {exponent} too large") from exc


def _checked(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        return _check_size(op(a, b))

    return apply


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: _checked(operator.add),
    ast.Sub: _checked(operator.sub),
    ast.Mult: _checked(operator.mul),
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _safe_pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _round(value: float, ndigits: int | None = None) -> float:
    return round(value) if ndigits is None else round(value, int(ndigits))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "round": _round,
    "abs": abs,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
}
_NAMES = {"pi": math.pi, "e": math.e}
_ALLOWED_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    *(_OPERATORS.keys()),
)


def _prepare(expression: str) -> str:
    text = expression.strip()
    # What models write for arithmetic, mapped to Python: 2^3, 3 × 4, 8 ÷ 2, $16.
    text = text.replace("^", "**").replace("×", "*").replace("÷", "/").replace("−", "-")
    text = text.replace("$", "")
    return text


def _format_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"the result is not a number: {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def evaluate_expression(expression: str) -> str:
    """Evaluate safe arithmetic and return the result as text.

    Allowed: numbers, ``+ - * / // % **`` (``^`` is read as ``**``),
    parentheses, ``pi``, ``e`` and ``sqrt round abs min max floor ceil log
    exp``. Everything else (names, attribute access, strings, subscripts,
    comparisons, several statements) is refused. Exponents are capped at
    1000 and integer results at 4096 bits. An integral float result prints as
    an integer (``36/2`` → ``"18"``); others with up to 12 significant digits.
    Raises ``CalculatorError`` (a ``ValueError``) for refused or failing input.
    """
    text = _prepare(expression)
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > _MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from exc
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise CalculatorError(
                f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** and ()"
            )
        if isinstance(node, ast.Constant) and (
            isinstance(node.value, bool) or not isinstance(node.value, int | float)
        ):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        if isinstance(node, ast.Name) and node.id not in _NAMES and node.id not in _FUNCTIONS:
            raise CalculatorError(f"unknown name {node.id!r}")
        if isinstance(node, ast.Call) and (
            not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords
        ):
            raise CalculatorError(f"only these functions are allowed: {', '.join(_FUNCTIONS)}")
    # Second line of defence: simpleeval with only the node handlers we allow.
    evaluator = SimpleEval(operators=dict(_OPERATORS), functions=dict(_FUNCTIONS), names=dict(_NAMES))
    evaluator.nodes = {
        ast.Expr: evaluator._eval_expr,
        ast.Name: evaluator._eval_name,
        ast.UnaryOp: evaluator._eval_unaryop,
        ast.BinOp: evaluator._eval_binop,
        ast.Call: evaluator._eval_call,
        ast.Constant: evaluator._eval_constant,
    }
    try:
        value = evaluator.eval(text, previously_parsed=ast.Expr(tree.body))
    except CalculatorError:
        raise
    except ZeroDivisionError as exc:
        raise CalculatorError("division by zero") from exc
    except (OverflowError, MemoryError) as exc:
        raise CalculatorError("result too large") from exc
    except Exception as exc:
        raise CalculatorError(str(exc) or type(exc).__name__) from exc
    return _format_number(value)


class CalculatorArgs(BaseModel):
    expression: str = Field(description="An arithmetic expression, e.g. '(16 - 3 - 4) * 2'.")


def _calculator(args: CalculatorArgs, context: ToolContext) -> str:
    return evaluate_expression(args.expression)


# --------------------------------------------------------------------------- search_documents

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "she",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
    ]
)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without English stop words (for BM25)."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in _STOPWORDS]


def rank_documents(query: str, documents: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The ``k`` documents that best match ``query`` by BM25 (Okapi, via
    rank_bm25) over title (weighted twice) + text, best first; ties keep
    document order. Returns ``[{"title", "text"}, …]``."""
    if not documents:
        return []
    # The title counts twice: a document *about* the query's entity should win
    # over one that merely mentions it (recall@3 of HotpotQA's supporting
    # documents: 0.75 → 0.78 on the shipped dev sample).
    corpus = [
        (tokenize(str(d.get("title", ""))) * 2 + tokenize(str(d.get("text", "")))) or ["_"] for d in documents
    ]
    scores = BM25Okapi(corpus).get_scores(tokenize(query))
    order = sorted(range(len(documents)), key=lambda i: (-float(scores[i]), i))
    return [
        {"title": str(documents[i].get("title", "")), "text": str(documents[i].get("text", ""))}
        for i in order[:k]
    ]


class SearchDocumentsArgs(BaseModel):
    query: str = Field(description="Words to look for in the documents.")
    k: int = Field(default=3, ge=1, le=10, description="How many documents to return.")


NO_DOCUMENTS = "No documents are available for this question; answer without searching."


def _search_documents(args: SearchDocumentsArgs, context: ToolContext) -> str | list[dict[str, Any]]:
    if not context.documents:
        return NO_DOCUMENTS
    return rank_documents(args.query, context.documents, args.k)


# --------------------------------------------------------------------------- sql_query

#: Rows of a result sent back to the model; the rest are only counted.
SQL_MAX_ROWS = 50
#: Seconds one query may run (counting the rows past ``SQL_MAX_ROWS`` included).
SQL_TIME_LIMIT_S = 2.0
#: SQLite VM instructions between two looks at the clock (a few µs of work).
_PROGRESS_INSTRUCTIONS = 1000
#: Bytes one string or blob may have (``SQLITE_LIMIT_LENGTH``): the progress
#: handler only runs between VM instructions, so one call such as
#: ``zeroblob(300000000)`` would otherwise run (and allocate) unchecked.
SQL_MAX_VALUE_BYTES = 1_000_000
#: Bytes of query text (``SQLITE_LIMIT_SQL_LENGTH``).
SQL_MAX_QUERY_BYTES = 100_000
#: Characters of one text or blob cell sent back to the model; the rest is cut.
SQL_MAX_CELL_CHARS = 1_000
#: Characters of the ``rows`` JSON sent back to the model; rows past it are only counted.
SQL_MAX_RESULT_CHARS = 20_000
NO_DATABASE = "No database comes with this question, so there is nothing to query."
SCHEMA_QUERY = "SELECT sql FROM sqlite_master WHERE type = 'table'"

# What a read-only SELECT (plain, WITH or WITH RECURSIVE) asks the authorizer for.
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# Pragmas that only describe the schema; every other pragma could change the
# connection (``query_only = OFF``) and is refused.
_SCHEMA_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)
# Functions refused although a SELECT may call them: ``fts3_tokenizer`` returns
# a memory address, the others read or write files or load code (the last three
# exist only in the sqlite3 shell; listed in case a build links them in).
_DENIED_FUNCTIONS = frozenset({"fts3_tokenizer", "load_extension", "readfile", "writefile", "edit"})
# One printf conversion: flags, width, precision, length, type (SQLite's printf.c).
_PRINTF_CONVERSION = re.compile(r"%[-+ #0,!]*(\*|\d+)?(?:\.(\*|\d+))?(?:ll|l)?(.)", re.DOTALL)
_TOO_BIG = (
    f"a value would exceed {SQL_MAX_VALUE_BYTES} bytes (the limit for one string or blob); "
    "make it smaller or return a count or a substr() instead"
)


class SQLQueryError(ValueError):
    """A query that was refused or failed; the message is written for the model."""


def _has_database(context: ToolContext) -> bool:
    return bool(context.metadata.get("database_path"))


def _json_cell(value: Any) -> Any:
    # SQLite gives None, int, float, str or bytes; a blob is shown as an SQL blob literal.
    # Also cuts column names and SQLite's error messages, which may quote any
    # part of the query or its data back.
    if isinstance(value, bytes):
        value = f"X'{value.hex()}'"
    if isinstance(value, str) and len(value) > SQL_MAX_CELL_CHARS:
        return f"{value[:SQL_MAX_CELL_CHARS]}…[cut: {len(value)} characters]"
    return value


def _bounded_printf(helper: sqlite3.Connection, too_big: list[str]) -> Callable[..., Any]:
    """SQLite's ``printf`` (alias ``format``), refusing a ``%c`` whose precision
    (the repeat count) is over ``SQL_MAX_VALUE_BYTES``.

    Why: in SQLite before 3.41 (3.40.1 here) ``printf('%.*c', 500000000, 'x')``
    keeps looping over the repeat count after the length limit is hit — about
    3 s, up to 11 s for 2**31, inside one function call where the progress
    handler cannot stop it — and then returns NULL. The checked call is
    forwarded to the built-in ``printf`` of ``helper`` (an in-memory
    connection with the same length limit); a NULL from it for a non-NULL
    format means the result was too big. Either way the function name is
    appended to ``too_big`` and an exception raised, which SQLite turns into
    "user-defined function raised exception".
    """

    def printf(fmt: Any = None, *args: Any) -> Any:
        if fmt is None:
            return None
        index = 0
        for match in _PRINTF_CONVERSION.finditer(str(fmt)):
            width, precision, kind = match.groups()
            if kind == "%" and width is None and precision is None:
                continue
            if width == "*":
                index += 1
            if precision == "*":
                raw = args[index] if index < len(args) else 0
                (count,) = helper.execute("SELECT abs(CAST(? AS INTEGER))", (raw,)).fetchone()
                index += 1
            else:
                count = int(precision or 0)
            if kind == "c" and count > SQL_MAX_VALUE_BYTES:
                too_big.append("printf")
                raise ValueError(_TOO_BIG)
            index += 1
        placeholders = ", ".join("?" * (1 + len(args)))
        (value,) = helper.execute(f"SELECT printf({placeholders})", (fmt, *args)).fetchone()
        if value is None:
            too_big.append("printf")
            raise ValueError(_TOO_BIG)
        return value

    return printf


def _table_names(connection: sqlite3.Connection) -> list[str]:
    rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
    return [str(name) for (name,) in rows]


def run_sql_query(
    database_path: str | Path,
    query: str,
    *,
    max_rows: int = SQL_MAX_ROWS,
    time_limit_s: float = SQL_TIME_LIMIT_S,
    root: str | Path | None = None,
) -> dict[str, Any]:
    """Run one read-only SQLite statement and return its result as JSON-able data.

    Returns ``{"columns": [name, …], "rows": [[value, …], …], "row_count": n}``:
    at most ``max_rows`` rows (values as SQLite gives them; a blob as
    ``"X'<hex>'"``), ``row_count`` the number of rows the query produced. A text
    or blob cell longer than ``SQL_MAX_CELL_CHARS`` characters is cut to that
    many, followed by ``"…[cut: <length> characters]"``; rows are added only
    while the ``rows`` JSON stays within ``SQL_MAX_RESULT_CHARS`` characters. When
    rows were left out (by ``max_rows`` or the size cap), ``"note"`` says how
    many were shown of how many, and why; a count cut off by the time limit is a
    lower bound and the note says "at least".

    Read-only three times over: the file is opened ``mode=ro`` (a ``file:`` URI),
    ``PRAGMA query_only = ON``, and an authorizer that lets through only what a
    SELECT needs (reading tables, functions, recursive CTEs, the schema pragmas
    ``table_info`` … and their table-valued forms ``pragma_table_info('t')``) —
    the first two alone still allow ``ATTACH`` and ``VACUUM INTO``, which create
    files. The functions in ``_DENIED_FUNCTIONS`` (``fts3_tokenizer`` returns a
    memory address; ``load_extension``, ``readfile`` …) are refused. More than
    one statement is refused by ``sqlite3`` before anything runs.

    Bounded in time and memory: a progress handler aborts the query after
    ``time_limit_s`` seconds; since it runs only between VM instructions, one
    expensive call is bounded by SQLite's own limits instead — no string or
    blob over ``SQL_MAX_VALUE_BYTES`` (``SQLITE_LIMIT_LENGTH``; ``zeroblob(3e8)``
    fails at once) and no query text over ``SQL_MAX_QUERY_BYTES`` — and by a
    checked ``printf``/``format`` (see ``_bounded_printf``). A fresh
    connection per call, so nothing (a pragma, a temp table) carries over
    between calls.

    ``root``: the dataset's folder (``context.metadata["database_root"]``,
    set at import); the file must still resolve inside it when opened.

    Raises ``SQLQueryError`` (a ``ValueError``) with a message for the model:
    missing database file, one that now resolves outside ``root``, empty query, several statements,
    a refused (writing) statement or function, the time limit, a value or query over its limit, or
    any SQLite error (for an unknown table or column the message lists the
    tables).
    """
    if not query.strip():
        raise SQLQueryError("empty query; write one SELECT statement")
    path = Path(database_path)
    # The model sees these messages: they name the file, not the server's folders.
    if not path.is_file():
        raise SQLQueryError(f"the database file {path.name} of this question is missing or not a file")
    resolved = path.resolve()
    if root is not None and not resolved.is_relative_to(Path(root).resolve()):
        # checked at import too; a link put in the way since then could lead
        # anywhere (the application's own database)
        raise SQLQueryError(
            f"the database file {path.name} of this question now leads outside its dataset's "
            "folder (a link was put in its place); re-import the dataset"
        )
    try:
        connection = sqlite3.connect(f"{resolved.as_uri()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise SQLQueryError(f"cannot open the database: {exc}") from exc
    helper = sqlite3.connect(":memory:", isolation_level=None)
    denied: list[int] = []
    denied_functions: list[str] = []
    too_big: list[str] = []
    timed_out = False
    deadline = time.monotonic() + time_limit_s

    def authorize(
        action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
    ) -> int:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            denied_functions.append(str(arg2))
            return sqlite3.SQLITE_DENY
        if action in _READ_ACTIONS or (action == sqlite3.SQLITE_PRAGMA and arg1 in _SCHEMA_PRAGMAS):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            # Asked while a table-valued pragma (pragma_table_info('t'))
            # sets up its virtual table. IGNORE turns any such column update
            # into a no-op, and SQLite refuses an UPDATE of sqlite_master
            # statement before asking ("table sqlite_master may not be modified").
            return sqlite3.SQLITE_IGNORE
        denied.append(action)
        return sqlite3.SQLITE_DENY

    def over_time() -> int:
        nonlocal timed_out
        timed_out = time.monotonic() > deadline
        return 1 if timed_out else 0

    try:
        for limited in (connection, helper):
            limited.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQL_MAX_VALUE_BYTES)
            limited.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, SQL_MAX_QUERY_BYTES)
        bounded_printf = _bounded_printf(helper, too_big)
        for name in ("printf", "format"):
            connection.create_function(name, -1, bounded_printf, deterministic=True)
        connection.execute("PRAGMA query_only = ON")
        connection.set_authorizer(authorize)
        connection.set_progress_handler(over_time, _PROGRESS_INSTRUCTIONS)
        rows: list[list[Any]] = []
        fetched = 0
        extra = 0
        rows_chars = 2  # the JSON of rows: "[" row ", " row … "]"
        over_size = False
        try:
            cursor = connection.execute(query)
            columns = [_json_cell(str(d[0])) for d in cursor.description or ()]  # a name can be long too
            for row in cursor.fetchmany(max_rows):
                fetched += 1
                cells = [_json_cell(v) for v in row]
                rows_chars += len(json.dumps(cells, ensure_ascii=False)) + (2 if rows else 0)
                over_size = over_size or rows_chars > SQL_MAX_RESULT_CHARS
                if not over_size:
                    rows.append(cells)
            try:
                while batch := cursor.fetchmany(1000):
                    extra += len(batch)
            except sqlite3.OperationalError:
                if not timed_out:
                    raise
        except sqlite3.ProgrammingError as exc:
            if "one statement" in str(exc):
                raise SQLQueryError("only one statement per call; send the queries one by one") from exc
            raise SQLQueryError(_json_cell(str(exc))) from exc
        except sqlite3.Error as exc:
            if denied_functions:
                raise SQLQueryError(
                    f"refused: the function {denied_functions[0]}() is not available in sql_query"
                ) from exc
            if denied:
                raise SQLQueryError(
                    "refused: sql_query only reads; send one SELECT (or WITH … SELECT)"
                ) from exc
            if timed_out:
                raise SQLQueryError(
                    f"stopped: the query ran longer than the {time_limit_s:g} s limit; simplify it or "
                    "add a LIMIT"
                ) from exc
            message = str(exc) or type(exc).__name__
            if too_big or message == "string or blob too big":
                raise SQLQueryError(_TOO_BIG) from exc
            if message == "query string is too large":
                raise SQLQueryError(
                    f"the query is longer than {SQL_MAX_QUERY_BYTES} bytes; shorten it"
                ) from exc
            if message.startswith(("no such table", "no such column")):
                connection.set_progress_handler(None, 0)
                tables = ", ".join(_table_names(connection))
                message += f" (the tables are: {tables}; {SCHEMA_QUERY} shows their columns)"
            raise SQLQueryError(_json_cell(message)) from exc  # SQLite quotes the query back
    finally:
        connection.close()
        helper.close()
    row_count = fetched + extra
    result: dict[str, Any] = {"columns": columns, "rows": rows, "row_count": row_count}
    if len(rows) < row_count or timed_out:
        total = f"at least {row_count}" if timed_out else str(row_count)
        reasons = []
        if over_size:
            reasons.append(
                f"the rows are capped at {SQL_MAX_RESULT_CHARS} characters of JSON; "
                "select fewer or shorter columns"
            )
        if timed_out:
            reasons.append(f"counting stopped at the {time_limit_s:g} s limit")
        why = f" ({'; '.join(reasons)})" if reasons else ""
        result["note"] = f"Only the first {len(rows)} of {total} rows are shown{why}."
    return result


class SQLQueryArgs(BaseModel):
    query: str = Field(description="One SQLite SELECT statement, e.g. 'SELECT count(*) FROM singer'.")


# --------------------------------------------------------------------------- ask_user, final_answer


class AskUserArgs(BaseModel):
    question: str = Field(description="One clarifying question for the user.")


def _ask_user(args: AskUserArgs, context: ToolContext) -> str:
    return f"Asked the user: {args.question}"


class FinalAnswerArgs(BaseModel):
    answer: Any = Field(description="The short final answer only, e.g. just the number or the option letter.")
    evidence: Any = Field(default="", description="The facts or tool results that support the answer.")
    reasoning: Any = Field(default="", description="A brief explanation of how the answer follows.")


def _final_answer(args: FinalAnswerArgs, context: ToolContext) -> str:
    return "Final answer recorded."


def calculator_tool() -> Tool:
    return Tool(
        name="calculator",
        description="Evaluate an arithmetic expression exactly. Supports + - * / // % ** and parentheses, "
        "and sqrt, round, abs, min, max, floor, ceil, log, exp.",
        parameters=CalculatorArgs,
        fn=_calculator,
    )


def search_documents_tool() -> Tool:
    return Tool(
        name="search_documents",
        description="Search the documents given with the question and return the best matching ones "
        "(title and text).",
        parameters=SearchDocumentsArgs,
        fn=_search_documents,
    )


def ask_user_tool() -> Tool:
    return Tool(
        name="ask_user",
        description="Ask the user one clarifying question when the question cannot be answered as asked. "
        "Ends the turn.",
        parameters=AskUserArgs,
        fn=_ask_user,
        ends_turn="ask",
    )


def final_answer_tool() -> Tool:
    return Tool(
        name="final_answer",
        description="Give the final answer and finish. 'answer' must be short: just the number, the option "
        "letter, yes/no or a few words.",
        parameters=FinalAnswerArgs,
        fn=_final_answer,
        ends_turn="final",
    )


def sql_query_tool(*, max_rows: int = SQL_MAX_ROWS, time_limit_s: float = SQL_TIME_LIMIT_S) -> Tool:
    """``sql_query``: one read-only query on the turn's SQLite database
    (``context.metadata["database_path"]``, see ``run_sql_query``), offered
    only in turns that have one.

    How the model learns the schema: the description tells it to run
    ``SCHEMA_QUERY`` (``SELECT sql FROM sqlite_master …``) first, and an
    unknown table or column comes back with the list of tables. That is the
    simplest thing that fits the loop: tool specs and the system prompt are
    built from the registry, not from the turn (specs are built once per
    process, ``shared_default_tools``), so putting each database's schema
    into them would need per-turn prompts; a schema query is one more step
    whose result is recorded and replayed on resume like any other.
    """

    def query(args: SQLQueryArgs, context: ToolContext) -> dict[str, Any]:
        database_path = context.metadata.get("database_path")
        if not database_path:
            # ToolRegistry.execute answers "unknown tool" first (the tool is
            # not available without a database); this covers a direct call
            raise SQLQueryError(NO_DATABASE)
        root = context.metadata.get("database_root")
        return run_sql_query(
            str(database_path),
            args.query,
            max_rows=max_rows,
            time_limit_s=time_limit_s,
            root=str(root) if root else None,
        )

    return Tool(
        name="sql_query",
        description="Run one read-only SQL query (SQLite) on the database that comes with this question. "
        f"Returns columns, rows (at most {max_rows}) and row_count. To see the tables and their columns, "
        f"first run: {SCHEMA_QUERY}",
        parameters=SQLQueryArgs,
        fn=query,
        available=_has_database,
    )


def default_registry() -> ToolRegistry:
    """A fresh registry with the built-in tools: ``calculator``,
    ``search_documents``, ``ask_user``, ``final_answer`` (offered in every
    turn) and ``sql_query`` (offered only when the turn's context has a
    ``database_path``; last, so the others keep their places)."""
    return ToolRegistry(
        [calculator_tool(), search_documents_tool(), ask_user_tool(), final_answer_tool(), sql_query_tool()]
    )
