"""``config.environment.env_number``: a numeric setting that is not a number is
ImproperlyConfigured naming the variable and the value (the settings module is
imported once by Django; this calls the helper, it does not reload settings)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.environment import env_number


def test_env_number_reads_the_variable_as_the_default_type(monkeypatch):
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", "7")
    assert env_number("AGENTLAB_TEST_NUMBER", 6) == 7
    assert env_number("AGENTLAB_TEST_NUMBER", 1.5) == 7.0
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", " 1e3 ")
    assert (
        env_number("AGENTLAB_TEST_NUMBER", 1.5) == 1000.0
    )  # Python's float syntax, spaces around it ignored
    monkeypatch.delenv("AGENTLAB_TEST_NUMBER")
    assert env_number("AGENTLAB_TEST_NUMBER", 6) == 6


@pytest.mark.parametrize(
    ("value", "default", "message"),
    [
        ("abc", 6, "AGENTLAB_TEST_NUMBER must be an integer, got 'abc'"),
        ("1.5", 6, "AGENTLAB_TEST_NUMBER must be an integer, got '1.5'"),
        ("ten", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got 'ten'"),
        ("", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got ''"),
        # django-environ's own cast dropped the letters: 13.0, 5.0, 25.1
        ("1e3x", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got '1e3x'"),
        ("5 minutes", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got '5 minutes'"),
        ("2.5.1", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got '2.5.1'"),
    ],
)
def test_env_number_names_the_variable_and_the_bad_value(monkeypatch, value, default, message):
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", value)
    with pytest.raises(ImproperlyConfigured) as excinfo:
        env_number("AGENTLAB_TEST_NUMBER", default)
    assert str(excinfo.value) == message


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        ("0", {"positive": True}, "AGENTLAB_TEST_NUMBER must be above 0, got '0'"),
        ("-5", {"minimum": 0.0}, "AGENTLAB_TEST_NUMBER must be at least 0.0, got '-5'"),
        ("inf", {}, "AGENTLAB_TEST_NUMBER must be a finite number, got 'inf'"),
        ("1e999", {}, "AGENTLAB_TEST_NUMBER must be a finite number, got '1e999'"),
    ],
)
def test_env_number_refuses_values_out_of_range(monkeypatch, value, bounds, message):
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", value)
    with pytest.raises(ImproperlyConfigured) as excinfo:
        env_number("AGENTLAB_TEST_NUMBER", 15.0, **bounds)
    assert str(excinfo.value) == message
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", "0")
    assert env_number("AGENTLAB_TEST_NUMBER", 15.0, minimum=0.0) == 0.0  # the bound itself is allowed


def test_manage_py_reports_a_bad_setting_in_one_line_with_exit_2(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "HEARTBEAT_S": "0", "AGENTLAB_SQLITE_PATH": str(tmp_path / "x.sqlite3")}
    env.pop("DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "manage.py", "sweep_turns"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == "configuration error: HEARTBEAT_S must be above 0, got '0'\n"


def _manage(tmp_path, *argv: str, **env_vars: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "AGENTLAB_SQLITE_PATH": str(tmp_path / "x.sqlite3"), **env_vars}
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_bad_mcp_server_setting_is_one_line_naming_the_server_and_exit_2(tmp_path):
    proc = _manage(tmp_path, "check", AGENTLAB_MCP_SERVERS='{"calc": {"comand": "srv"}}')

    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "configuration error: AGENTLAB_MCP_SERVERS: server 'calc': unknown keys ['comand']"
    )


def test_manage_py_check_reports_a_plugin_of_the_setting_that_cannot_be_loaded(tmp_path):
    bad = _manage(tmp_path, "check", AGENTLAB_PLUGINS="example, no_such_plugin")
    good = _manage(tmp_path, "check", AGENTLAB_PLUGINS="example, example_prompt")

    assert bad.returncode == 1
    assert "(agentlab.E001) AGENTLAB_PLUGINS: no plugin 'no_such_plugin'" in bad.stderr
    assert good.returncode == 0, good.stderr


def test_a_batch_command_runs_the_plugin_check_but_not_the_url_check(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    # run_eval serves no page: it runs the models' and AgentLab's checks
    # (BATCH_COMMAND_CHECKS), not the URL check that imports every API router
    bad = _manage(tmp_path, "compare_runs", "a", "b", AGENTLAB_PLUGINS="example, no_such_plugin")
    probe = (
        "import sys, django; from django.core.management import call_command; django.setup(); "
        "from evaluation.management.commands.compare_runs import Command; "
        "Command().check(tags=Command.requires_system_checks); "
        "print(sorted(m for m in sys.modules if m in ('config.api', 'config.urls', 'turns.api')))"
    )
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "AGENTLAB_SQLITE_PATH": str(tmp_path / "x.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    env.pop("DATABASE_URL", None)
    imported = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )

    assert bad.returncode == 1
    assert "(agentlab.E001) AGENTLAB_PLUGINS: no plugin 'no_such_plugin'" in bad.stderr
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "[]"


def test_a_database_url_without_a_scheme_is_one_line_and_exit_2(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DATABASE_URL": "garbage", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.endswith(
        "configuration error: DATABASE_URL is not a database URL (no scheme such as postgres://): give "
        "postgres://USER@HOST:PORT/NAME, or leave it unset for the embedded SQLite file\n"
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "AGENTLAB_CHAT_HISTORY",
            "everything",
            "AGENTLAB_CHAT_HISTORY must be answers or full, got 'everything'",
        ),
        ("AGENTLAB_LLM_CONTEXT_WINDOW", "100", "AGENTLAB_LLM_CONTEXT_WINDOW must be at least 256, got '100'"),
    ],
)
def test_a_bad_conversation_history_setting_is_one_line_and_exit_2(tmp_path, variable, value, message):
    proc = _manage(tmp_path, "check", **{variable: value})
    assert proc.returncode == 2
    assert proc.stderr == f"configuration error: {message}\n"
