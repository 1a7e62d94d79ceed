"""``manage.py cancel_run`` on a run nobody follows: its open turns are
cancelled, their predictions completed, the run finished as cancelled."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from evaluation.datasets.services import dataset_resolve
from evaluation.models import Prediction, Run
from evaluation.run.lifecycle import run_start
from evaluation.run.plan import run_plan
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancel_run_ends_the_open_turns_and_finishes_the_run(capsys):
    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="to-cancel", dataset=dataset, config={"model": "m"})
    planned, _ = run_plan(run=run, limit=3, max_steps=2, model="m")
    Turn.objects.filter(pk=planned[0].turn_id).update(status="running")  # a worker has it
    call_command("cancel_run", "to-cancel")
    assert "3 turn(s) cancelled; run finished as cancelled" in capsys.readouterr().out
    run.refresh_from_db()
    assert run.status == "cancelled" and run.metrics["total"] == 3
    turns = dict(Turn.objects.filter(predictions__run=run).values_list("pk", "status"))
    # queued ones end at once; the running one is asked to stop (its driver ends it)
    assert turns == {
        planned[0].turn_id: "running",
        planned[1].turn_id: "cancelled",
        planned[2].turn_id: "cancelled",
    }
    assert Turn.objects.get(pk=planned[0].turn_id).cancel_requested
    done = Prediction.objects.filter(run=run, completed_at__isnull=False)
    assert set(done.values_list("turn_id", flat=True)) == {planned[1].turn_id, planned[2].turn_id}
    assert set(done.values_list("stop_reason", flat=True)) == {"cancelled"}


def test_cancel_run_counts_the_turns_the_following_run_eval_cancelled_first(monkeypatch, capsys):
    """The count is the run's cancelled turns: a run_eval following the run
    cancels queued turns once it sees the status, racing the command's loop
    (issue: '142 turn(s) cancelled' printed where the run showed 168)."""
    from evaluation.run import cancel as cancel_module
    from turns.services import turn_cancel

    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="raced", dataset=dataset, config={"model": "m"})
    planned, _ = run_plan(run=run, limit=3, max_steps=2, model="m")
    calls: list[int] = []

    def follower_first(*, turn_id, acting_user=None):
        if not calls:  # the follower's poll ends the last queued turn first
            turn_cancel(turn_id=planned[2].turn_id)
        calls.append(turn_id)
        return turn_cancel(turn_id=turn_id, acting_user=acting_user)

    monkeypatch.setattr(cancel_module, "turn_cancel", follower_first)
    call_command("cancel_run", "raced")
    assert len(calls) == 3  # the third call met a turn already cancelled
    assert "run raced: 3 turn(s) cancelled; run finished as cancelled" in capsys.readouterr().out
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert set(Prediction.objects.filter(run=run).values_list("stop_reason", flat=True)) == {"cancelled"}


def test_cancel_run_of_an_unknown_run_is_exit_2():
    with pytest.raises(CommandError) as excinfo:
        call_command("cancel_run", "nope")
    assert excinfo.value.returncode == 2 and "no run 'nope'" in str(excinfo.value)
    assert not Run.objects.exists()


def test_cancel_run_of_a_finished_run_with_nothing_left_is_refused_and_changes_nothing():
    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="done-run", dataset=dataset, config={"model": "m"})
    planned, _ = run_plan(run=run, limit=2, max_steps=2, model="m")
    Turn.objects.filter(pk__in=[item.turn_id for item in planned]).update(status="succeeded")
    Prediction.objects.filter(run=run).update(completed_at=timezone.now(), correct=True)
    Run.objects.filter(pk=run.pk).update(status="success")
    with pytest.raises(CommandError) as excinfo:
        call_command("cancel_run", "done-run")
    assert excinfo.value.returncode == 2
    assert "has finished (success) and has no turn left to cancel: nothing changed" in str(excinfo.value)
    run.refresh_from_db()
    assert run.status == "success"


def test_cancel_run_of_a_failed_run_with_queued_turns_cancels_them():
    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="failed-run", dataset=dataset, config={"model": "m"})
    run_plan(run=run, limit=2, max_steps=2, model="m")
    Run.objects.filter(pk=run.pk).update(status="error")  # e.g. the broker went away after planning
    call_command("cancel_run", "failed-run")
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert set(Turn.objects.filter(predictions__run=run).values_list("status", flat=True)) == {"cancelled"}


def test_a_resumed_cancelled_run_stays_cancelled_until_retry_errors_drives_its_examples(endpoint):
    from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply

    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="half", dataset=dataset, config={"model": "stub-model"})
    run_plan(run=run, limit=2, max_steps=2, model="stub-model")
    call_command("cancel_run", "half")  # both end before they ran
    with StubLLMServer(lambda body: final_answer_reply("7")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as excinfo:
            call_command("run_eval", "demo", "--run-id", "half", "--limit", "2", "--no-review")
        run.refresh_from_db()
        # nothing driven: the run is not passed off as a finished success
        assert excinfo.value.returncode == 1 and server.request_count == 0
        assert "its cancelled examples run again with --retry-errors" in str(excinfo.value)
        assert run.status == "cancelled"
        call_command("run_eval", "demo", "--run-id", "half", "--limit", "2", "--no-review", "--retry-errors")
        assert server.request_count == 2
    run.refresh_from_db()
    assert run.status == "success" and run.metrics["errors"] == 0
    assert not Prediction.objects.filter(run=run, stop_reason="cancelled").exists()
