"""``sql_query``: one read-only query on the turn's SQLite database — the sandbox
(``run_sql_query``) and the tool around it."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .registry import Tool, ToolContext

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
    connection = _open_read_only(Path(database_path), root)
    helper = sqlite3.connect(":memory:", isolation_level=None)
    guard = _QueryGuard(deadline=time.monotonic() + time_limit_s)
    try:
        guard.install(connection, helper)
        try:
            fetched = _fetch(connection.execute(query), max_rows=max_rows, guard=guard)
        except sqlite3.ProgrammingError as exc:
            if "one statement" in str(exc):
                raise SQLQueryError("only one statement per call; send the queries one by one") from exc
            raise SQLQueryError(_json_cell(str(exc))) from exc
        except sqlite3.Error as exc:
            raise _query_error(exc, guard=guard, connection=connection, time_limit_s=time_limit_s) from exc
    finally:
        connection.close()
        helper.close()
    result: dict[str, Any] = {
        "columns": fetched.columns,
        "rows": fetched.rows,
        "row_count": fetched.row_count,
    }
    note = _rows_note(fetched, timed_out=guard.timed_out, time_limit_s=time_limit_s)
    if note:
        result["note"] = note
    return result


def _open_read_only(path: Path, root: str | Path | None) -> sqlite3.Connection:
    """A read-only connection to ``path``, which must be a file that still
    resolves inside ``root`` (when given). Raises ``SQLQueryError``."""
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
        return sqlite3.connect(f"{resolved.as_uri()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise SQLQueryError(f"cannot open the database: {exc}") from exc


class _QueryGuard:
    """What keeps one query read-only and bounded, and what it saw: the
    actions and functions it denied, a value over the size limit, the time
    limit passed (``deadline``, ``time.monotonic()`` seconds)."""

    def __init__(self, *, deadline: float) -> None:
        self.deadline = deadline
        self.denied: list[int] = []
        self.denied_functions: list[str] = []
        self.too_big: list[str] = []
        self.timed_out = False

    def install(self, connection: sqlite3.Connection, helper: sqlite3.Connection) -> None:
        """Set the limits, the checked ``printf``/``format``, ``query_only``,
        the authorizer and the progress handler on ``connection``."""
        for limited in (connection, helper):
            limited.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQL_MAX_VALUE_BYTES)
            limited.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, SQL_MAX_QUERY_BYTES)
        bounded_printf = _bounded_printf(helper, self.too_big)
        for name in ("printf", "format"):
            connection.create_function(name, -1, bounded_printf, deterministic=True)
        connection.execute("PRAGMA query_only = ON")
        connection.set_authorizer(self.authorize)
        connection.set_progress_handler(self.over_time, _PROGRESS_INSTRUCTIONS)

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
    ) -> int:
        """SQLite's authorizer: only what a SELECT needs."""
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            self.denied_functions.append(str(arg2))
            return sqlite3.SQLITE_DENY
        if action in _READ_ACTIONS or (action == sqlite3.SQLITE_PRAGMA and arg1 in _SCHEMA_PRAGMAS):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            # Asked while a table-valued pragma (pragma_table_info('t'))
            # sets up its virtual table. IGNORE turns any such column update
            # into a no-op, and SQLite refuses an UPDATE of sqlite_master
            # statement before asking ("table sqlite_master may not be modified").
            return sqlite3.SQLITE_IGNORE
        self.denied.append(action)
        return sqlite3.SQLITE_DENY

    def over_time(self) -> int:
        """SQLite's progress handler: non-zero (abort) once past the deadline."""
        self.timed_out = time.monotonic() > self.deadline
        return 1 if self.timed_out else 0


@dataclass
class _Fetched:
    """A query's result as shown: its ``columns``, the ``rows`` kept, and
    ``row_count`` (every row produced, counted past the ones kept)."""

    columns: list[Any]
    rows: list[list[Any]]
    row_count: int
    over_size: bool


def _fetch(cursor: sqlite3.Cursor, *, max_rows: int, guard: _QueryGuard) -> _Fetched:
    """Keep at most ``max_rows`` rows while their JSON stays within
    ``SQL_MAX_RESULT_CHARS``, then count the rest (until the time limit)."""
    columns = [_json_cell(str(d[0])) for d in cursor.description or ()]  # a name can be long too
    rows: list[list[Any]] = []
    fetched = extra = 0
    rows_chars = 2  # the JSON of rows: "[" row ", " row … "]"
    over_size = False
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
        if not guard.timed_out:
            raise
    return _Fetched(columns=columns, rows=rows, row_count=fetched + extra, over_size=over_size)


def _query_error(
    exc: sqlite3.Error, *, guard: _QueryGuard, connection: sqlite3.Connection, time_limit_s: float
) -> SQLQueryError:
    """The model's message for a query SQLite refused or stopped."""
    if guard.denied_functions:
        return SQLQueryError(
            f"refused: the function {guard.denied_functions[0]}() is not available in sql_query"
        )
    if guard.denied:
        return SQLQueryError("refused: sql_query only reads; send one SELECT (or WITH … SELECT)")
    if guard.timed_out:
        return SQLQueryError(
            f"stopped: the query ran longer than the {time_limit_s:g} s limit; simplify it or add a LIMIT"
        )
    message = str(exc) or type(exc).__name__
    if guard.too_big or message == "string or blob too big":
        return SQLQueryError(_TOO_BIG)
    if message == "query string is too large":
        return SQLQueryError(f"the query is longer than {SQL_MAX_QUERY_BYTES} bytes; shorten it")
    if message.startswith(("no such table", "no such column")):
        connection.set_progress_handler(None, 0)
        tables = ", ".join(_table_names(connection))
        message += f" (the tables are: {tables}; {SCHEMA_QUERY} shows their columns)"
    return SQLQueryError(_json_cell(message))  # SQLite quotes the query back


def _rows_note(fetched: _Fetched, *, timed_out: bool, time_limit_s: float) -> str | None:
    """Why fewer rows are shown than the query produced, or ``None``."""
    if len(fetched.rows) >= fetched.row_count and not timed_out:
        return None
    total = f"at least {fetched.row_count}" if timed_out else str(fetched.row_count)
    reasons = []
    if fetched.over_size:
        reasons.append(
            f"the rows are capped at {SQL_MAX_RESULT_CHARS} characters of JSON; "
            "select fewer or shorter columns"
        )
    if timed_out:
        reasons.append(f"counting stopped at the {time_limit_s:g} s limit")
    why = f" ({'; '.join(reasons)})" if reasons else ""
    return f"Only the first {len(fetched.rows)} of {total} rows are shown{why}."


class SQLQueryArgs(BaseModel):
    query: str = Field(description="One SQLite SELECT statement, e.g. 'SELECT count(*) FROM singer'.")


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
        read_only=True,  # a replay may run it live (agentlab.agent.replay)
    )
