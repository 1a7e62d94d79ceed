"""Run blocking Django ORM calls from asyncio code on a bounded thread pool.

Django's own async ORM methods funnel every query through one thread
(``sync_to_async(thread_sensitive=True)``), which would serialise all the turns
an evaluation runs at once. ``DatabaseThreads`` gives each worker thread its own
connection instead, and closes those connections when it shuts down — a
lingering connection would otherwise keep a PostgreSQL test database from
being dropped and hold file handles on SQLite.

A pool thread has no request cycle, so nothing would retire a connection
that broke (a database restart): Django does that in ``close_old_connections``
at each request's start and end. ``DatabaseThreads`` does it around each call
instead (``connections_retire_broken``): after a call that raised a database
error, a connection that no longer answers is closed, so the thread's next
call reconnects; before a call on a connection idle for ``IDLE_CHECK_S``,
an obsolete one is closed and a usable one health-checked at first use
(``CONN_HEALTH_CHECKS``). A database outage then costs the calls in flight,
never the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections, router
from django.db.models import Field, Model

from common.sql import execute, rows_update_sql, update_by_pk_sql

P = ParamSpec("P")
R = TypeVar("R")

#: A pool thread's connections idle for longer than this (seconds) are
#: checked before their next call: closed when obsolete (``CONN_MAX_AGE``)
#: or broken, else health-checked at first use (``CONN_HEALTH_CHECKS``).
IDLE_CHECK_S = 1.0


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached or the
    connection broke (Django's ``OperationalError`` / ``InterfaceError``:
    a restart, a network cut, "the connection is closed", SQLite's
    "database is locked"): worth trying again later, unlike a bad query or
    a constraint. Nothing else counts (``IntegrityError`` is a conflict)."""
    return isinstance(exc, OperationalError | InterfaceError)


def connections_retire_broken() -> None:
    """Do for this thread's open connections what Django does at the end of
    a request (``close_old_connections``): close one whose last statement
    failed and that no longer answers a ``SELECT 1``, or that outlived
    ``CONN_MAX_AGE``, so the next query reconnects. Connections inside an
    ``atomic`` block are left alone (their owner is still using them). Never
    raises for a broken connection: closing one that is dead is what it is for."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block:
            continue
        try:
            conn.close_if_unusable_or_obsolete()
        except DatabaseError:
            conn.close()


class DatabaseThreads:
    """A pool of ``max_workers`` threads for ORM calls made from coroutines.

    ``await pool.run(fn, *args, **kwargs)`` runs ``fn`` on a pool thread and
    returns its result (exceptions propagate). ``close()`` waits for running
    calls and closes every connection the pool opened. Usable as a context
    manager.
    """

    def __init__(self, max_workers: int = 8) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="agentlab-db")
        self._lock = threading.Lock()
        self._connections: list[Any] = []
        self._local = threading.local()
        self._companions: dict[str, Any] = {}

    def companion(self, key: str, make: Callable[[], R]) -> R:
        """The pool's one object under ``key``, made by ``make()`` on first
        use: something that lives as long as the pool (the event log's
        group-commit writer, ``turns.driver.writer``). ``close()`` calls its
        ``close()`` first, before the pool's threads stop."""
        with self._lock:
            found = self._companions.get(key)
            if found is None:
                found = self._companions[key] = make()
            return found

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` on a pool thread, in a copy of the caller's
        context (contextvars), as ``sync_to_async(thread_sensitive=False)``
        would run it — without that wrapper's per-call set-up, which cost as
        much CPU as a short query (``bench/eval_throughput.py``)."""
        context = contextvars.copy_context()
        call = functools.partial(self._call, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, call)

    def _call(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        local = self._local
        if not getattr(local, "seen", False):
            local.seen = True
            local.used_at = time.monotonic()
            with self._lock:
                self._connections.extend(connections[alias] for alias in connections)
        elif time.monotonic() - local.used_at > IDLE_CHECK_S:
            connections_retire_broken()
        try:
            return fn(*args, **kwargs)
        except DatabaseError:
            # no request cycle here to retire a connection a restart broke:
            # close it now, or every later call on this thread fails too
            connections_retire_broken()
            raise
        finally:
            local.used_at = time.monotonic()

    def close(self) -> None:
        with self._lock:
            companions, self._companions = list(self._companions.values()), {}
        for companion in companions:
            companion.close()
        self._executor.shutdown(wait=True)
        # Closing is a blocking ORM call: when close() runs inside an event
        # loop, Django refuses it in that thread, so do it in a fresh one.
        closer = threading.Thread(target=self._close_connections, name="agentlab-db-close")
        closer.start()
        closer.join()

    def _close_connections(self) -> None:
        with self._lock:
            for conn in self._connections:
                # The connection belongs to a pool thread that is gone now.
                conn.inc_thread_sharing()
                try:
                    conn.close()
                finally:
                    conn.dec_thread_sharing()
            self._connections.clear()

    def __enter__(self) -> DatabaseThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def concrete_field(model: type[Model], name: str) -> Field[Any, Any]:
    """The field ``name`` of ``model`` that has a column of its own (a foreign key
    counts, by its ``…_id`` column). Raises ``FieldDoesNotExist`` for an unknown
    name and ``TypeError`` for a reverse relation or a many-to-many field.
    Kept per (model, name): models do not change while the process runs, and
    the hot path's statements ask for the same fields for every example."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or not field.column:
        raise TypeError(f"{model.__name__}.{name} has no column of its own")
    return field


def column_of(model: type[Model], name: str) -> str:
    """The database column of ``model``'s field ``name`` (``concrete_field``'s errors)."""
    column = concrete_field(model, name).column
    assert column is not None  # concrete_field checked it
    return column


def pk_column(model: type[Model]) -> str:
    """The database column of ``model``'s primary key."""
    pk = model._meta.pk
    assert pk is not None and pk.column, f"{model.__name__} has no primary key column"
    return pk.column


def column_values(
    model: type[Model], values: Mapping[str, Any], connection: Any
) -> tuple[tuple[str, ...], list[Any]]:
    """The columns of ``values`` (field name → value) of ``model`` and their
    parameters, each value prepared by its field's ``get_db_prep_save`` as the
    ORM's own ``UPDATE`` would (the statements are ``common.sql``'s). Raises
    ``FieldDoesNotExist`` for an unknown field name."""
    key = (model, tuple(values))
    found = _columns.get(key)
    if found is None:
        # the same for every example: found once per (model, fields); a race finds it twice, alike
        found = _columns[key] = (
            tuple(column_of(model, name) for name in key[1]),
            tuple(concrete_field(model, name) for name in key[1]),
        )
    columns, fields = found
    pairs = zip(fields, values.values(), strict=True)
    params = [field.get_db_prep_save(value, connection) for field, value in pairs]
    return columns, params


_columns: dict[tuple[type[Model], tuple[str, ...]], tuple[tuple[str, ...], tuple[Field[Any, Any], ...]]] = {}


def update_by_pk(model: type[Model], pk: Any, values: Mapping[str, Any]) -> int:
    """``model.objects.filter(pk=pk).update(**values)`` as one prepared
    ``UPDATE`` without the ORM's query compiler — which was most of the cost
    of completing a prediction on ``run_eval``'s hot path. Plain values only
    (no expressions); ``auto_now`` fields are not touched, as with
    ``update()``. Returns the number of rows updated (0 or 1)."""
    if not values:
        raise ValueError("update_by_pk needs at least one value")
    deferred: list[tuple[type[Model], Any, Mapping[str, Any]]] | None = getattr(_deferral, "rows", None)
    if deferred is not None:
        deferred.append((model, pk, values))
        return 1
    connection = connections[router.db_for_write(model)]
    columns, params = column_values(model, values, connection)
    text = update_by_pk_sql(connection, table=model._meta.db_table, pk=pk_column(model), columns=columns)
    pk_field = model._meta.pk
    assert pk_field is not None  # pk_column checked it
    _, rowcount = execute(connection, text, [*params, pk_field.get_db_prep_value(pk, connection)])
    return rowcount


_deferral = threading.local()


@contextlib.contextmanager
def updates_deferred() -> Iterator[None]:
    """Within this block (on this thread), ``update_by_pk`` collects its
    updates instead of running each; at the block's end they are written
    with ``rows_update``, one statement per (model, set of fields) —
    the group-commit writer (``turns.driver.writer``) completes a batch's
    predictions this way. Inside it ``update_by_pk`` returns 1 without
    knowing; a row that turns out missing raises the model's
    ``DoesNotExist`` at the block's end (roll the transaction back and do
    the updates one by one to learn which). Nothing is written when the
    block raises."""
    if getattr(_deferral, "rows", None) is not None:
        raise RuntimeError("updates_deferred blocks do not nest")
    rows: list[tuple[type[Model], Any, Mapping[str, Any]]] = []
    _deferral.rows = rows
    try:
        yield
    finally:
        _deferral.rows = None
    groups: dict[tuple[type[Model], tuple[str, ...]], dict[Any, Mapping[str, Any]]] = {}
    for model, pk, values in rows:
        groups.setdefault((model, tuple(values)), {})[pk] = values
    for (model, _), by_pk in groups.items():
        missing = set(by_pk) - rows_update(model, by_pk)
        if missing:
            gone = f"{model.__name__} {sorted(missing)[:5]} do not exist"
            raise model.DoesNotExist(gone)  # type: ignore[attr-defined]


def rows_update(model: type[Model], rows: Mapping[Any, Mapping[str, Any]]) -> set[Any]:
    """Update several rows of ``model`` (primary key → field values, every
    row the same fields) in one ``UPDATE … FROM (VALUES …)``
    (``common.sql.rows_update_sql``), the rows in key order. Values are
    prepared by their fields as ``update_by_pk``'s are. Returns the keys of
    the rows updated (a missing row is not among them). One row, or a
    database without ``UPDATE … FROM``, takes ``update_by_pk`` per row."""
    if not rows:
        return set()
    keys = sorted(rows)
    names = tuple(rows[keys[0]])
    if not names or any(tuple(rows[k]) != names for k in keys):
        raise ValueError("rows_update needs the same, non-empty fields for every row")
    connection = connections[router.db_for_write(model)]
    if len(keys) == 1 or not _update_from(connection):
        return {k for k in keys if update_by_pk(model, k, rows[k])}
    pk_field = model._meta.pk
    assert pk_field is not None
    fields = [concrete_field(model, name) for name in names]
    types = tuple(str(f.db_type(connection)) for f in (pk_field, *fields))
    params: list[Any] = []
    for key in keys:
        params.append(pk_field.get_db_prep_value(key, connection))
        params.extend(column_values(model, rows[key], connection)[1])
    text = rows_update_sql(
        connection,
        table=model._meta.db_table,
        pk=pk_column(model),
        columns=tuple(column_of(model, name) for name in names),
        types=types,
        rows=len(keys),
    )
    found, _ = execute(connection, text, params)
    updated = {row[0] for row in found}
    return {k for k in keys if k in updated}


def _update_from(connection: Any) -> bool:
    """Whether the database runs ``UPDATE … FROM`` (PostgreSQL; SQLite ≥ 3.33)."""
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version_info >= (3, 33)
    return False
