"""``DatabaseThreads`` outside Django's request cycle: a connection that a
database restart broke is closed and the next call reconnects (issue 18).

A real broken connection on the machine's PostgreSQL: the pool thread's own
backend is terminated with ``pg_terminate_backend`` (what a restart does to
every connection), nothing else is touched.
"""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError, connection, connections

from common import db as db_module
from common.db import DatabaseThreads, is_connection_error

pytestmark = pytest.mark.django_db(transaction=True)


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _terminate_from_another_connection(pid: int) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    connections["default"].close()


async def _terminate(pid: int) -> None:
    await asyncio.to_thread(_terminate_from_another_connection, pid)


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")


async def test_a_broken_connection_costs_one_call_and_the_next_reconnects(postgres_only, monkeypatch):
    monkeypatch.setattr(db_module, "IDLE_CHECK_S", 3600.0)  # no check before the call: it fails
    with DatabaseThreads(max_workers=1) as pool:
        pid = await pool.run(_backend_pid)
        await _terminate(pid)
        with pytest.raises(OperationalError):
            await pool.run(_backend_pid)
        again = await pool.run(_backend_pid)  # the same pool thread, a new connection
        assert again != pid
        assert await pool.run(_backend_pid) == again


async def test_an_idle_broken_connection_is_replaced_before_the_call(postgres_only, monkeypatch):
    monkeypatch.setattr(db_module, "IDLE_CHECK_S", 0.0)  # every call counts as after an idle spell
    with DatabaseThreads(max_workers=1) as pool:
        pid = await pool.run(_backend_pid)
        await _terminate(pid)
        # health-checked (CONN_HEALTH_CHECKS) before use: no call is lost
        assert await pool.run(_backend_pid) != pid


def test_connection_errors_are_told_from_other_database_errors():
    from django.db import IntegrityError, InterfaceError, ProgrammingError

    assert is_connection_error(OperationalError("server closed the connection unexpectedly"))
    assert is_connection_error(InterfaceError("the connection is closed"))
    assert not is_connection_error(IntegrityError("duplicate key"))
    assert not is_connection_error(ProgrammingError("syntax error"))
    assert not is_connection_error(ValueError("no"))
