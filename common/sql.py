"""Every hand-written SQL statement of AgentLab, in one module (issue 40;
docs/architecture.md#hand-written-sql).

The ORM says almost everything; seven statements it cannot say as cheaply or
at all are written here (and the readiness probe's ``SELECT 1``, ``ping_sql``,
and the online scorer's advisory lock, ``advisory_lock_sql``):
the conditional claim of a queued turn that also reserves its first seqs
(``UPDATE … WHERE status = 'queued' … RETURNING``),
the seq reservation of one turn and of several (``UPDATE … RETURNING
last_seq``), the multi-row event ``INSERT … RETURNING``, the group-commit
writer's row lock of a batch's turns (``SELECT … ORDER BY id FOR NO KEY
UPDATE``) and its many-row ``UPDATE … FROM (VALUES …)``, the watcher's
heartbeat ``UPDATE … RETURNING`` and its ``SELECT``, and the prepared
``UPDATE`` by primary key on ``run_eval``'s hot path. Their callers
(``turns.events``, ``turns.driver.lease``, ``common.db.update_by_pk``,
``config.health``, ``monitoring.score_claim``, ``turns.driver.writer``) choose the values; no other
production module writes SQL text or calls ``cursor.execute``.

**Composition.** Each statement is built with psycopg's ``psycopg.sql``
(``SQL``, ``Identifier``, ``Placeholder``): table and column names are
``Identifier``\\s, values are ``%s`` placeholders, never text pasted into the
statement. **Per vendor, here only** (``render``): on PostgreSQL the statement
is rendered with the psycopg connection (its quoting and encoding); Django's
SQLite backend cannot execute a ``psycopg.sql`` object, so there the same
composition is rendered without a connection — standard SQL, identifiers in
double quotes and ``%s`` placeholders, which Django's SQLite backend turns
into ``?``. The one difference in the statements themselves is the
watcher's and the writer's row lock (``FOR NO KEY UPDATE`` on PostgreSQL,
none on SQLite, whose IMMEDIATE transaction holds the database's write
lock), and the many-row update's casts (PostgreSQL types a ``VALUES`` list
from its parameters, so each is cast to its column's type there; SQLite
has no column types to cast to).

A statement's text depends only on its shape (vendor, table, columns,
number of rows), so each shape is rendered once per process and cached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psycopg import sql

#: Rendered statements: (vendor, statement name, shape) → SQL text.
_rendered: dict[tuple[Any, ...], str] = {}
#: A many-row statement's head, row and tail rendered: (vendor, name, shape) → texts.
_row_parts: dict[tuple[Any, ...], tuple[str, str, str]] = {}


def render(connection: Any, statement: sql.Composable) -> str:
    """The SQL text of ``statement`` for Django connection ``connection``: the
    one place the vendors differ (see the module docstring)."""
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        return statement.as_string(connection.connection)
    return statement.as_string(None)


def _text(connection: Any, key: tuple[Any, ...], build: Callable[[], sql.Composable]) -> str:
    """``render(build())`` cached by ``(vendor, *key)``; a race renders twice, alike."""
    full = (connection.vendor, *key)
    text = _rendered.get(full)
    if text is None:
        text = _rendered[full] = render(connection, build())
    return text


def _ids(names: Sequence[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(name) for name in names)


def _marks(count: int) -> sql.Composed:
    return sql.SQL(", ").join([sql.Placeholder()] * count)


def execute(connection: Any, text: str, params: Sequence[Any]) -> tuple[list[tuple[Any, ...]], int]:
    """Run statement ``text`` with ``params`` on ``connection``; return its
    rows (``[]`` for a statement that returns none) and its row count."""
    with connection.cursor() as cursor:
        cursor.execute(text, list(params))
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount


def update_by_pk_sql(connection: Any, *, table: str, pk: str, columns: tuple[str, ...]) -> str:
    """``UPDATE table SET c1 = %s, … WHERE pk = %s``: the columns' values, then the key."""
    query = "UPDATE {table} SET {assignments} WHERE {pk} = {value}"
    return _text(
        connection,
        ("update_by_pk", table, pk, columns),
        lambda: sql.SQL(query).format(
            table=sql.Identifier(table),
            assignments=sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder()) for c in columns
            ),
            pk=sql.Identifier(pk),
            value=sql.Placeholder(),
        ),
    )


def seq_advance_sql(connection: Any, *, table: str, pk: str, columns: tuple[str, ...], held: bool) -> str:
    """Reserve seqs of one turn: ``UPDATE table SET last_seq = last_seq + %s,
    c1 = %s, … WHERE pk = %s [AND job_id = %s AND status IN (%s, %s)]
    RETURNING last_seq``. Parameters: the count, the columns' values, the turn
    id, and with ``held`` the claim token and the two statuses it may have."""
    query = (
        "UPDATE {table} SET {last_seq} = {last_seq} + {count}{assignments} WHERE {pk} = {value}{held} "
        "RETURNING {last_seq}"
    )
    held_clause = "AND {job_id} = {mark} AND {status} IN ({mark}, {mark})"
    return _text(
        connection,
        ("seq_advance", table, pk, columns, held),
        lambda: sql.SQL(query).format(
            table=sql.Identifier(table),
            last_seq=sql.Identifier("last_seq"),
            count=sql.Placeholder(),
            assignments=sql.SQL("").join(
                sql.SQL(", {} = {}").format(sql.Identifier(c), sql.Placeholder()) for c in columns
            ),
            pk=sql.Identifier(pk),
            value=sql.Placeholder(),
            held=sql.SQL(" " + held_clause).format(
                job_id=sql.Identifier("job_id"), status=sql.Identifier("status"), mark=sql.Placeholder()
            )
            if held
            else sql.SQL(""),
        ),
    )


def seq_advance_each_sql(connection: Any, *, table: str, pk: str, count: int) -> str:
    """Reserve one seq of each of ``count`` turns: ``UPDATE table SET last_seq =
    last_seq + 1, updated_at = %s WHERE pk IN (%s, …) RETURNING pk, last_seq``."""
    query = (
        "UPDATE {table} SET {last_seq} = {last_seq} + 1, {updated_at} = {mark} "
        "WHERE {pk} IN ({ids}) RETURNING {pk}, {last_seq}"
    )
    return _text(
        connection,
        ("seq_advance_each", table, pk, count),
        lambda: sql.SQL(query).format(
            table=sql.Identifier(table),
            last_seq=sql.Identifier("last_seq"),
            updated_at=sql.Identifier("updated_at"),
            mark=sql.Placeholder(),
            pk=sql.Identifier(pk),
            ids=_marks(count),
        ),
    )


def events_insert_sql(
    connection: Any, *, table: str, columns: tuple[str, ...], returning: tuple[str, ...], rows: int
) -> str:
    """``INSERT INTO table (columns) VALUES (%s, …), … RETURNING returning``
    for ``rows`` rows, their values row after row."""
    return _rows_text(
        connection,
        ("events_insert", table, columns, returning),
        lambda: (
            sql.SQL("INSERT INTO {table} ({columns}) VALUES ").format(
                table=sql.Identifier(table), columns=_ids(columns)
            ),
            sql.SQL("({})").format(_marks(len(columns))),
            sql.SQL(" RETURNING {}").format(_ids(returning)),
        ),
        rows,
    )


def _rows_text(
    connection: Any,
    key: tuple[Any, ...],
    build: Callable[[], tuple[sql.Composable, sql.Composable, sql.Composable]],
    rows: int,
) -> str:
    """A statement of ``rows`` repeated row groups: its head, one row and its
    tail are composed and rendered once per shape (``build``); the text for
    a number of rows is those joined (``, `` between rows), cached too.
    Composing every row of a many-row statement cost the group-commit
    writer more CPU than its statements saved."""
    full = (connection.vendor, *key, rows)
    text = _rendered.get(full)
    if text is None:
        shape = (connection.vendor, *key)
        parts = _row_parts.get(shape)
        if parts is None:
            head, row, tail = build()
            parts = _row_parts[shape] = (
                render(connection, head),
                render(connection, row),
                render(connection, tail),
            )
        head_text, row_text, tail_text = parts
        text = _rendered[full] = head_text + ", ".join([row_text] * rows) + tail_text
    return text


def turn_claim_sql(connection: Any, *, table: str, pk: str, returning: tuple[str, ...]) -> str:
    """The claim of a queued turn (``turns.driver.lease``): ``UPDATE table SET
    status = %s, heartbeat_at = %s, job_id = %s, updated_at = %s, phase = %s,
    started_at = COALESCE(started_at, %s), attempts = at least 1, last_seq =
    last_seq + %s WHERE pk = %s AND status = %s RETURNING returning,
    started_at = heartbeat_at`` (the last column: whether it never ran)."""
    query = (
        "UPDATE {table} SET {status} = {mark}, {heartbeat_at} = {mark}, {job_id} = {mark}, "
        "{updated_at} = {mark}, {phase} = {mark}, {started_at} = COALESCE({started_at}, {mark}), "
        "{attempts} = CASE WHEN {attempts} < 1 THEN 1 ELSE {attempts} END, "
        "{last_seq} = {last_seq} + {mark} "
        "WHERE {pk} = {mark} AND {status} = {mark} "
        "RETURNING {returning}, {started_at} = {heartbeat_at}"
    )
    names = ("status", "heartbeat_at", "job_id", "updated_at", "phase", "started_at", "attempts", "last_seq")
    return _text(
        connection,
        ("turn_claim", table, pk, returning),
        lambda: sql.SQL(query).format(
            table=sql.Identifier(table),
            pk=sql.Identifier(pk),
            returning=_ids(returning),
            mark=sql.Placeholder(),
            **{name: sql.Identifier(name) for name in names},
        ),
    )


def turns_beat_sql(connection: Any, *, table: str, pk: str, count: int) -> str:
    """The watcher's heartbeat of ``count`` turns (``turns.driver.lease``):
    ``UPDATE table SET heartbeat_at = %s WHERE <held> RETURNING pk, job_id,
    status, cancel_requested``, where ``<held>`` is ``pk IN (ids) AND job_id
    IN (tokens) AND status IN (%s, %s)``; on a database with row locks the
    rows are locked in id order first (``pk IN (SELECT pk … ORDER BY pk FOR
    NO KEY UPDATE)``, ``FOR UPDATE`` elsewhere). Parameters: the time, the
    ids, the tokens, the two statuses."""
    query = "UPDATE {table} SET {heartbeat_at} = {mark} WHERE {target} RETURNING {columns}"
    held = "{pk} IN ({ids}) AND {job_id} IN ({ids}) AND {status} IN ({mark}, {mark})"
    vendor_lock = connection.features.has_select_for_update, connection.vendor == "postgresql"

    def build() -> sql.Composable:
        where = sql.SQL(held).format(
            pk=sql.Identifier(pk),
            ids=_marks(count),
            job_id=sql.Identifier("job_id"),
            status=sql.Identifier("status"),
            mark=sql.Placeholder(),
        )
        target: sql.Composable = where
        if vendor_lock[0]:
            lock = "FOR NO KEY UPDATE" if vendor_lock[1] else "FOR UPDATE"
            locked = "{pk} IN (SELECT {pk} FROM {table} WHERE {where} ORDER BY {pk} " + lock + ")"
            target = sql.SQL(locked).format(pk=sql.Identifier(pk), table=sql.Identifier(table), where=where)
        # SQLite: no row locks; the statement holds the database's write lock
        return sql.SQL(query).format(
            table=sql.Identifier(table),
            heartbeat_at=sql.Identifier("heartbeat_at"),
            mark=sql.Placeholder(),
            target=target,
            columns=_ids((pk, "job_id", "status", "cancel_requested")),
        )

    return _text(connection, ("turns_beat", table, pk, count, vendor_lock), build)


def turns_poll_sql(connection: Any, *, table: str, pk: str, count: int) -> str:
    """The watcher's plain poll of ``count`` turns: ``SELECT pk, job_id,
    status, cancel_requested FROM table WHERE pk IN (%s, …)``."""
    return _text(
        connection,
        ("turns_poll", table, pk, count),
        lambda: sql.SQL("SELECT {columns} FROM {table} WHERE {pk} IN ({ids})").format(
            columns=_ids((pk, "job_id", "status", "cancel_requested")),
            table=sql.Identifier(table),
            pk=sql.Identifier(pk),
            ids=_marks(count),
        ),
    )


def ping_sql(connection: Any) -> str:
    """``SELECT 1``: the readiness probe's question to the database (``config.health``)."""
    return _text(connection, ("ping",), lambda: sql.SQL("SELECT 1"))


def advisory_lock_sql(connection: Any, *, unlock: bool = False) -> str:
    """``SELECT pg_try_advisory_lock(%s)`` (or ``pg_advisory_unlock``): a
    session-level PostgreSQL advisory lock on a 64-bit key, taken without
    waiting (``monitoring.score_claim``); PostgreSQL only."""
    name = "pg_advisory_unlock" if unlock else "pg_try_advisory_lock"
    return _text(
        connection,
        ("advisory", unlock),
        lambda: sql.SQL("SELECT {fn}({key})").format(fn=sql.Identifier(name), key=sql.Placeholder()),
    )


def turns_lock_sql(connection: Any, *, table: str, pk: str, count: int) -> str:
    """Lock ``count`` turns in id order and read what the group-commit writer
    (``turns.events.event_append_batch``) checks and advances: ``SELECT pk,
    last_seq, job_id, status FROM table WHERE pk IN (%s, …) ORDER BY pk FOR NO
    KEY UPDATE`` (no lock clause on SQLite, whose transaction holds the write
    lock). Locking in one order means two batches never deadlock."""
    postgres = connection.vendor == "postgresql"
    query = "SELECT {columns} FROM {table} WHERE {pk} IN ({ids}) ORDER BY {pk}" + (
        " FOR NO KEY UPDATE" if postgres else ""
    )
    return _text(
        connection,
        ("turns_lock", table, pk, count),
        lambda: sql.SQL(query).format(
            columns=_ids((pk, "last_seq", "job_id", "status")),
            table=sql.Identifier(table),
            pk=sql.Identifier(pk),
            ids=_marks(count),
        ),
    )


def rows_update_sql(
    connection: Any, *, table: str, pk: str, columns: tuple[str, ...], types: tuple[str, ...], rows: int
) -> str:
    """Update ``rows`` rows of ``table``, each with its own values, in one
    statement: ``UPDATE table SET c1 = v.column2, … FROM (VALUES (%s, %s, …),
    …) AS v WHERE table.pk = v.column1 RETURNING pk``. Parameters: row after
    row, its key then its columns' values. On PostgreSQL each parameter is
    cast to its column's type (``types``: the key's, then the columns', as
    Django's ``Field.db_type`` gives them); SQLite (≥ 3.33 for ``UPDATE …
    FROM``) takes them as they are."""
    if len(types) != len(columns) + 1:
        raise ValueError("rows_update_sql needs the key's type and one type per column")
    cast = connection.vendor == "postgresql"

    def build() -> tuple[sql.Composable, sql.Composable, sql.Composable]:
        marks = [
            sql.SQL("CAST({} AS {})").format(sql.Placeholder(), sql.SQL(kind)) if cast else sql.Placeholder()
            for kind in types
        ]
        v = sql.Identifier("v")
        head = sql.SQL("UPDATE {table} SET {assignments} FROM (VALUES ").format(
            table=sql.Identifier(table),
            assignments=sql.SQL(", ").join(
                sql.SQL("{} = {}.{}").format(sql.Identifier(c), v, sql.Identifier(f"column{i}"))
                for i, c in enumerate(columns, start=2)
            ),
        )
        tail = sql.SQL(") AS {v} WHERE {table}.{pk} = {v}.{first} RETURNING {pk}").format(
            table=sql.Identifier(table), v=v, pk=sql.Identifier(pk), first=sql.Identifier("column1")
        )
        return head, sql.SQL("({})").format(sql.SQL(", ").join(marks)), tail

    return _rows_text(connection, ("rows_update", table, pk, columns, types), build, rows)
