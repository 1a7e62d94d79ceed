"""The command that resumes a run (issue 18): every word shell-quoted, the
options a resume must repeat repeated; exit 75 for a Celery broker that is
down, and a baseline that is the run itself refused before the run. (Exit 75
across a real database restart: ``tests/faults/test_restarts.py``.)"""

from __future__ import annotations

import shlex

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.net import free_port
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply
from config.celery import app
from evaluation.models import Run
from evaluation.run.exits import resume_command
from tests.redis_support import BROKER_URL
from turns.models import Turn

DEFAULTS = {"concurrency": 4, "plugins": [], "mcp": [], "review": True, "retry_errors": False}


def test_a_run_id_with_spaces_and_quotes_pastes_back_as_it_was():
    command = resume_command(
        dataset="my data/set.jsonl", run_id="nightly 'big' run", options={**DEFAULTS}, defaults=DEFAULTS
    )
    words = shlex.split(command)
    assert words[1:] == ["manage.py", "run_eval", "my data/set.jsonl", "--run-id", "nightly 'big' run"]
    assert "'nightly '\"'\"'big'\"'\"' run'" in command  # shlex.quote's form


def test_options_that_differ_from_their_defaults_are_repeated():
    options = {
        **DEFAULTS,
        "concurrency": 8,
        "limit": 20,
        "plugins": ["a", "b"],
        "mcp": ["calc=python -m x"],
        "review": False,
        "price_in": 0.5,
        "price_out": 1.5,
        "celery": True,
        "queue": "nightly",
        "max_in_flight": 16,
    }
    words = shlex.split(resume_command(dataset="demo", run_id="r1", options=options, defaults=DEFAULTS))
    assert words[1:] == [
        "manage.py", "run_eval", "demo", "--run-id", "r1", "--limit", "20", "--concurrency", "8",
        "--queue", "nightly", "--max-in-flight", "16", "--price-in", "0.5", "--price-out", "1.5",
        "--plugin", "a", "--plugin", "b", "--mcp", "calc=python -m x", "--no-review", "--celery",
    ]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_celery_with_a_broker_that_is_down_is_exit_75_and_writes_nothing(endpoint, settings, capsys):
    server = StubLLMServer(lambda body: final_answer_reply("1"))
    endpoint(server)
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings.CELERY_BROKER_URL = dead
    saved = app.conf.broker_url
    app.conf.update(broker_url=dead)
    try:
        with pytest.raises(SystemExit) as exited:
            call_command("run_eval", "demo", "--celery", "--run-id", "no broker", "--no-review")
    finally:
        app.conf.update(broker_url=saved)
        server.stop()
    assert exited.value.code == 75
    err = capsys.readouterr().err
    assert f"the Celery broker cannot be reached (redis://127.0.0.1:{dead.split(':')[2]}" in err
    assert "Connection refused; the run was not started" in err
    assert "once the broker is back, start run 'no broker' with:" in err
    assert err.rstrip().endswith("manage.py run_eval demo --run-id 'no broker' --no-review --celery")
    assert not Run.objects.exists() and not Turn.objects.exists()
    assert server.request_count == 0


@pytest.mark.django_db
def test_a_baseline_that_is_the_run_itself_is_refused_before_the_run(endpoint):
    server = StubLLMServer(lambda body: final_answer_reply("1"))
    endpoint(server)
    try:
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "demo", "--run-id", "selfy", "--baseline", "selfy", "--no-review")
    finally:
        server.stop()
    assert excinfo.value.returncode == 2
    assert "--baseline selfy is the run itself (--run-id)" in str(excinfo.value)
    assert server.request_count == 0 and not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_fails_mid_run_is_exit_75_and_the_run_stays_resumable(
    endpoint, settings, capsys, monkeypatch
):
    from kombu.exceptions import OperationalError as KombuOperationalError

    from evaluation.run import evaluate as run_eval
    from evaluation.run import on_workers
    from evaluation.run.worker import eval_example_run

    def send_fails(*args, **kwargs):
        raise KombuOperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    server = StubLLMServer(lambda body: final_answer_reply("1"))
    endpoint(server)
    settings.CELERY_BROKER_URL = BROKER_URL
    monkeypatch.setattr(on_workers, "broker_check", lambda: None)  # it answered before the run
    monkeypatch.setattr(eval_example_run, "apply_async", send_fails)
    monkeypatch.setattr(run_eval, "queue_readers", lambda queue: 0)  # no worker answers
    monkeypatch.setattr(on_workers, "queue_readers", lambda queue: 0)
    try:
        with pytest.raises(SystemExit) as exited:
            call_command("run_eval", "demo", "--celery", "--run-id", "cut", "--no-review", "--limit", "2")
    finally:
        server.stop()
    assert exited.value.code == 75
    err = capsys.readouterr().err
    assert "no Celery worker reads queue 'celery' now: the run waits until one does" in err
    assert "the Celery broker failed mid-run: Error 111" in err
    assert "once the broker is back, resume run cut:" in err
    run = Run.objects.get(run_id="cut")
    # not finished as an error: the same run id sends what is left and follows it
    assert run.status == "started" and run.driver == ""
    assert set(Turn.objects.filter(predictions__run=run).values_list("status", flat=True)) == {"queued"}
