"""``common.sql``: every hand-written SQL statement, composed with psycopg's
``sql`` module and rendered per vendor in one place (issue 40). Each
statement's text is checked and the statement run, on whichever database
the test run uses: ``make test-postgres`` runs this file on PostgreSQL,
``make test-sqlite`` on SQLite."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from common.db import pk_column, update_by_pk
from common.sql import (
    advisory_lock_sql,
    events_insert_sql,
    execute,
    ping_sql,
    render,
    seq_advance_each_sql,
    seq_advance_sql,
    turn_claim_sql,
    turns_beat_sql,
    turns_poll_sql,
    update_by_pk_sql,
)
from turns.models import Turn, TurnEvent
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent
T = Turn._meta.db_table


def test_identifiers_are_quoted_and_values_are_placeholders():
    from psycopg import sql

    text = render(connection, sql.SQL("SELECT {} FROM {}").format(sql.Identifier('a"b'), sql.Identifier("t")))
    assert text == 'SELECT "a""b" FROM "t"'  # a quote inside a name is doubled, never closes it
    assert update_by_pk_sql(connection, table="t", pk="id", columns=("a", "b")) == (
        'UPDATE "t" SET "a" = %s, "b" = %s WHERE "id" = %s'
    )


def test_the_seq_statements_have_the_texts_they_promise():
    assert seq_advance_sql(connection, table=T, pk="id", columns=("updated_at",), held=False) == (
        f'UPDATE "{T}" SET "last_seq" = "last_seq" + %s, "updated_at" = %s '
        'WHERE "id" = %s RETURNING "last_seq"'
    )
    assert seq_advance_sql(connection, table=T, pk="id", columns=(), held=True) == (
        f'UPDATE "{T}" SET "last_seq" = "last_seq" + %s WHERE "id" = %s '
        'AND "job_id" = %s AND "status" IN (%s, %s) RETURNING "last_seq"'
    )
    assert seq_advance_each_sql(connection, table=T, pk="id", count=2) == (
        f'UPDATE "{T}" SET "last_seq" = "last_seq" + 1, "updated_at" = %s '
        'WHERE "id" IN (%s, %s) RETURNING "id", "last_seq"'
    )
    assert events_insert_sql(connection, table="e", columns=("a", "b"), returning=("id",), rows=2) == (
        'INSERT INTO "e" ("a", "b") VALUES (%s, %s), (%s, %s) RETURNING "id"'
    )
    assert ping_sql(connection) == "SELECT 1"


def test_the_claim_and_the_watchers_statements_per_vendor():
    assert turn_claim_sql(connection, table=T, pk="id", returning=("question",)) == (
        f'UPDATE "{T}" SET "status" = %s, "heartbeat_at" = %s, "job_id" = %s, "updated_at" = %s, '
        '"phase" = %s, "started_at" = COALESCE("started_at", %s), '
        '"attempts" = CASE WHEN "attempts" < 1 THEN 1 ELSE "attempts" END, "last_seq" = "last_seq" + %s '
        'WHERE "id" = %s AND "status" = %s RETURNING "question", "started_at" = "heartbeat_at"'
    )
    held = '"id" IN (%s) AND "job_id" IN (%s) AND "status" IN (%s, %s)'
    target = {
        "postgresql": f'"id" IN (SELECT "id" FROM "{T}" WHERE {held} ORDER BY "id" FOR NO KEY UPDATE)',
        "sqlite": held,  # no row locks: the statement holds the database's write lock
    }[connection.vendor]
    assert turns_beat_sql(connection, table=T, pk="id", count=1) == (
        f'UPDATE "{T}" SET "heartbeat_at" = %s WHERE {target} '
        'RETURNING "id", "job_id", "status", "cancel_requested"'
    )
    assert turns_poll_sql(connection, table=T, pk="id", count=3) == (
        f'SELECT "id", "job_id", "status", "cancel_requested" FROM "{T}" WHERE "id" IN (%s, %s, %s)'
    )


def test_each_statement_runs_and_does_what_it_says(owner):
    """The statements run as the callers run them (``turns.events``,
    ``turns.driver.lease``, ``common.db``)."""
    turn = turn_create(owner=owner, question="q")  # queued, last_seq 1
    pk = pk_column(Turn)
    now = Turn._meta.get_field("updated_at").get_db_prep_save(timezone.now(), connection)

    advance = seq_advance_sql(connection, table=T, pk=pk, columns=(), held=False)
    rows, _ = execute(connection, advance, [2, turn.pk])
    assert rows == [(3,)]
    held = seq_advance_sql(connection, table=T, pk=pk, columns=(), held=True)
    assert execute(connection, held, [1, turn.pk, "nobody", "running", "waiting"])[0] == []  # not held

    claim = turn_claim_sql(connection, table=T, pk=pk, returning=("question", "attempts", "last_seq"))
    claimed, _ = execute(connection, claim, ["running", now, "job-1", now, "act", now, 1, turn.pk, "queued"])
    assert [(q, int(a), int(s), bool(fresh)) for q, a, s, fresh in claimed] == [("q", 1, 4, True)]
    again = ["running", now, "job-2", now, "act", now, 1, turn.pk, "queued"]
    assert execute(connection, claim, again)[0] == []  # not queued any more

    rows, _ = execute(connection, seq_advance_each_sql(connection, table=T, pk=pk, count=1), [now, turn.pk])
    assert rows == [(turn.pk, 5)]
    columns = ("turn_id", "seq", "type", "data", "created_at")
    insert = events_insert_sql(
        connection, table=TurnEvent._meta.db_table, columns=columns, returning=(pk, "turn_id", "seq"), rows=2
    )
    data = TurnEvent._meta.get_field("data").get_db_prep_save({"phase": "act"}, connection)
    inserted, _ = execute(
        connection, insert, [turn.pk, 4, "phase", data, now, turn.pk, 5, "phase", data, now]
    )
    assert sorted((t, s) for _, t, s in inserted) == [(turn.pk, 4), (turn.pk, 5)]
    assert sorted(TurnEvent.objects.filter(turn=turn).values_list("seq", flat=True)) == [1, 4, 5]

    beat_sql = turns_beat_sql(connection, table=T, pk=pk, count=1)
    beat, _ = execute(connection, beat_sql, [now, turn.pk, "job-1", "running", "waiting"])
    assert [(i, j, s, bool(c)) for i, j, s, c in beat] == [(turn.pk, "job-1", "running", False)]
    polled, _ = execute(connection, turns_poll_sql(connection, table=T, pk=pk, count=1), [turn.pk])
    assert [(i, j, s) for i, j, s, _ in polled] == [(turn.pk, "job-1", "running")]

    assert update_by_pk(Turn, turn.pk, {"cancel_requested": True}) == 1
    assert update_by_pk(Turn, turn.pk + 10_000, {"cancel_requested": True}) == 0
    assert Turn.objects.get(pk=turn.pk).cancel_requested is True
    assert execute(connection, ping_sql(connection), [])[0] == [(1,)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="advisory locks are PostgreSQL's")
def test_the_advisory_lock_is_taken_once_and_released():
    assert advisory_lock_sql(connection) == 'SELECT "pg_try_advisory_lock"(%s)'
    assert execute(connection, advisory_lock_sql(connection), [42])[0] == [(True,)]
    # another session cannot take it while this one holds it
    from django.db import connections

    other = connections.create_connection("default")
    try:
        assert execute(other, advisory_lock_sql(other), [42])[0] == [(False,)]
        assert execute(connection, advisory_lock_sql(connection, unlock=True), [42])[0] == [(True,)]
        assert execute(other, advisory_lock_sql(other), [42])[0] == [(True,)]
        execute(other, advisory_lock_sql(other, unlock=True), [42])
    finally:
        other.close()


def test_no_production_module_but_common_sql_opens_a_database_cursor():
    """The hand-written statements stay behind one module: no other
    production module opens a cursor on a database connection to execute
    SQL (tests' database helpers and migrations aside; the agent's SQL tool
    queries a dataset's own SQLite file, not AgentLab's database, through
    ``sqlite3`` without a cursor object)."""
    callers = []
    for package in ("config", "agentlab", "common", "apikeys", "turns", "evaluation", "monitoring"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" in relative.parts or "testing" in relative.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "cursor":
                    callers.append(str(relative))
    assert callers, "the walk found common/sql.py's own call"
    assert sorted(set(callers)) == ["common/sql.py"]
