"""What a test needs to run ``manage.py`` in a child process on the test's
own database and stub endpoint."""

from __future__ import annotations

import os

from django.db import connection

from agentlab.testing.stub_llm import StubLLMServer


def subprocess_env(server: StubLLMServer) -> dict[str, str]:
    """This process's environment for a child ``manage.py``: the test
    database (the SQLite file, or PostgreSQL's URL) and ``server`` as the
    endpoint (model ``stub-model``)."""
    env = database_env()
    env.update(AGENTLAB_LLM_BASE_URL=server.base_url, AGENTLAB_LLM_API_KEY="k", AGENTLAB_MODEL="stub-model")
    return env


def database_env() -> dict[str, str]:
    """This process's environment with the test database (the SQLite file,
    or PostgreSQL's URL) for a child process."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AGENTLAB_SQLITE_PATH")}
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        env["AGENTLAB_SQLITE_PATH"] = str(s["NAME"])
    else:
        env["DATABASE_URL"] = (
            f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
        )
    return env
