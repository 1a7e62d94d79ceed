"""Fixtures of the fault tests: one private PostgreSQL cluster and one private
Redis for the session (``servers``), with a migrated template database from
which each test gets its own database, and a ``Stack`` per test."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from .servers import ROOT, PrivatePostgres, PrivateRedis, Stack, missing_tools

TEMPLATE = "agentlab_template"


@pytest.fixture(scope="session")
def private_servers():
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    pg = PrivatePostgres().init().start()
    redis = PrivateRedis().start()
    try:
        pg.sql("postgres", f'CREATE DATABASE "{TEMPLATE}"')
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"],
            cwd=ROOT,
            env=Stack(pg=pg, redis=redis, dbname=TEMPLATE, tmp=pg.dir).env,
            check=True,
            timeout=180,
        )
        yield pg, redis
    finally:
        redis.destroy()
        pg.destroy()


@pytest.fixture
def stack(private_servers, tmp_path):
    """A database of its own (a copy of the migrated template) and the
    environment of AgentLab's processes against the private servers; the
    processes it started are stopped after the test."""
    pg, redis = private_servers
    dbname = f"faults_{uuid.uuid4().hex[:8]}"
    pg.sql("postgres", f'CREATE DATABASE "{dbname}" TEMPLATE "{TEMPLATE}"')
    stack = Stack(pg=pg, redis=redis, dbname=dbname, tmp=tmp_path)
    yield stack
    stack.stop()
    pg.sql("postgres", f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
