"""Scheduled evaluations (issue 17) in process: a schedule and its
django-celery-beat ``PeriodicTask`` saved and deleted together, the admin
form's field errors, one firing's run, comparison, flag, log line and mail
(``scheduled_run`` called as the task calls it), the run admin's filter, and
the guard against a ``celery`` schedule waiting for its own worker slot.
The whole beat → worker path is ``test_schedules_beat.py``."""

from __future__ import annotations

import json
import logging

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils.html import escape
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from evaluation.models import EvalSchedule, Run
from evaluation.schedules.capacity import free_slots
from evaluation.schedules.firing import scheduled_run
from evaluation.schedules.options import schedule_check
from evaluation.schedules.sync import SCHEDULE_TASK, schedule_delete, schedule_save
from tests.evaluation.schedules.schedule_support import ALL_MATH, nightly, stub_lab
from tests.redis_support import BROKER_URL

pytestmark = pytest.mark.django_db(transaction=True)

ADMINS = [("Ops", "ops@example.com")]


@pytest.fixture
def lab(tmp_path, settings):
    with stub_lab(tmp_path, settings) as oracle:
        yield oracle


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123")


def test_saving_a_schedule_writes_its_periodic_task_and_disabling_and_deleting_follow(lab):
    schedule = nightly(every_s=600)
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert task.task == SCHEDULE_TASK == "evaluation.schedules.tasks.scheduled_eval_run"
    assert json.loads(task.kwargs) == {"schedule_id": schedule.pk}
    assert (task.interval.every, task.interval.period, task.crontab) == (600, "seconds", None)
    assert task.enabled and task.queue is None and task.name == f"evaluation schedule #{schedule.pk}: nightly"

    schedule.enabled = False
    schedule.interval = None
    schedule.crontab = CrontabSchedule.objects.create(minute="0", hour="3")
    schedule_save(schedule=schedule)
    task.refresh_from_db()
    assert not task.enabled and task.interval is None and task.crontab.hour == "3"
    assert PeriodicTask.objects.filter(task=SCHEDULE_TASK).count() == 1

    schedule_delete(schedule=schedule)
    assert not EvalSchedule.objects.exists()
    assert not PeriodicTask.objects.filter(task=SCHEDULE_TASK).exists()


def test_a_bad_schedule_is_refused_with_errors_on_its_fields(lab):
    interval = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    crontab = CrontabSchedule.objects.create(minute="0")
    bad = EvalSchedule(
        name="bad", dataset="nope", concurrency=0, queue="q", alpha=1.5, interval=interval, crontab=crontab
    )
    with pytest.raises(ValidationError) as caught:
        schedule_save(schedule=bad)
    errors = caught.value.message_dict
    assert "no dataset named 'nope'" in errors["dataset"][0]
    # said as the form says it: the field, not run_eval's option
    assert errors["concurrency"][0] == "concurrency must be between 1 and 1024, got 0"
    assert "choose exactly one schedule" in errors["__all__"][0]
    assert errors["alpha"][0].startswith("alpha must be between 0 and 1")
    assert not EvalSchedule.objects.exists() and not PeriodicTask.objects.filter(task=SCHEDULE_TASK).exists()


def test_a_celery_schedule_may_not_send_its_turns_to_its_own_queue(lab, settings):
    settings.CELERY_BROKER_URL = BROKER_URL
    settings.AGENTLAB_SCHEDULE_QUEUE = "schedules"
    interval = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    schedule = EvalSchedule(name="c", dataset="pairs", celery=True, queue="schedules", interval=interval)
    with pytest.raises(ValidationError) as caught:
        schedule_check(schedule)
    assert "would wait for itself" in caught.value.message_dict["queue"][0]
    schedule.queue = "turns"
    assert schedule_check(schedule).queue == "turns"


def _form(interval_pk: int, **values: str) -> dict[str, str]:
    data = {
        "name": "nightly",
        "enabled": "on",
        "interval": str(interval_pk),
        "crontab": "",
        "dataset": "pairs",
        "model": "",
        "limit": "",
        "concurrency": "4",
        "max_steps": "",
        "epochs": "",
        "queue": "",
        "judge_model": "",
        "plugins": "",
        "baseline_policy": "previous",
        "alpha": "0.05",
    }
    return {**data, **values}


def test_the_admin_form_shows_bad_options_on_their_fields_and_saves_good_ones(lab, client, superuser):
    client.force_login(superuser)
    interval = IntervalSchedule.objects.create(every=3600, period=IntervalSchedule.SECONDS)
    url = "/admin/evaluation/evalschedule/add/"
    assert client.get(url).status_code == 200
    # eval_request stops at the first bad option: one form per option
    for values, field, text in [
        ({"concurrency": "0"}, "concurrency", "concurrency must be between 1 and 1024, got 0"),
        ({"queue": "turns"}, "queue", "queue goes with celery"),
        ({"plugins": "no-such-plugin"}, "plugins", "plugin no-such-plugin"),
        ({"epochs": "1000"}, "epochs", "epochs must be between 1 and 100"),
    ]:
        response = client.post(url, _form(interval.pk, **values))
        assert response.status_code == 200
        assert text in response.context["adminform"].form.errors[field][0]
    response = client.post(url, _form(interval.pk, dataset="missing"))
    assert response.status_code == 200
    assert "no dataset named 'missing'" in response.context["adminform"].form.errors["dataset"][0]
    assert not EvalSchedule.objects.exists()

    response = client.post(url, _form(interval.pk))
    assert response.status_code == 302
    schedule = EvalSchedule.objects.get(name="nightly")
    assert (
        schedule.periodic_task.enabled
        and json.loads(schedule.periodic_task.kwargs)["schedule_id"] == schedule.pk
    )
    listing = client.get("/admin/evaluation/evalschedule/")
    assert listing.status_code == 200 and [s.name for s in listing.context["cl"].result_list] == ["nightly"]
    change = f"/admin/evaluation/evalschedule/{schedule.pk}/change/"
    page = client.get(change)
    assert page.status_code == 200 and f"evaluation schedule #{schedule.pk}: nightly" in page.content.decode()
    response = client.post(change, {k: v for k, v in _form(interval.pk).items() if k != "enabled"})
    assert response.status_code == 302
    assert not PeriodicTask.objects.get(pk=schedule.periodic_task_id).enabled
    response = client.post(f"/admin/evaluation/evalschedule/{schedule.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not PeriodicTask.objects.filter(task=SCHEDULE_TASK).exists()


def test_a_regression_is_flagged_logged_and_mailed_and_the_changelist_filters_it(
    lab, settings, caplog, client, superuser
):
    settings.ADMINS = ADMINS
    caplog.set_level(logging.INFO, logger="evaluation.schedules")
    schedule = nightly()
    first = scheduled_run(schedule_id=schedule.pk)
    assert first.run.status == "success" and first.baseline is None
    first.run.refresh_from_db()
    assert first.run.schedule_id == schedule.pk and first.run.regression is None
    lab.wrong = set(ALL_MATH)
    second = scheduled_run(schedule_id=schedule.pk)
    run = Run.objects.get(pk=second.run.pk)
    assert run.regression is True and run.baseline_id == first.run.pk and run.schedule_id == schedule.pk
    assert run.regressions[0].startswith("overall: accuracy 1.000 → 0.250")
    assert "task type 'math'" in run.regressions[1] and len(run.regressions) == 2
    assert second.mailed and len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["ops@example.com"]
    assert message.subject == (
        "[AgentLab] Regression in scheduled evaluation nightly: "
        f"run {run.run_id} vs baseline {first.run.run_id}"
    )
    assert f"/admin/evaluation/run/{run.pk}/change/" in message.body and run.regressions[0] in message.body
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and r.name == "evaluation.schedules"
    ]
    assert len(warnings) == 1 and "regressed against" in warnings[0].getMessage()

    client.force_login(superuser)
    page = client.get("/admin/evaluation/run/", {"regression": "yes"})
    assert page.status_code == 200
    assert [r.run_id for r in page.context["cl"].result_list] == [run.run_id]
    page = client.get("/admin/evaluation/run/", {"regression": "none"})
    assert [r.run_id for r in page.context["cl"].result_list] == [first.run.run_id]
    detail = client.get(f"/admin/evaluation/run/{run.pk}/change/")
    assert detail.status_code == 200
    html = detail.content.decode()
    assert escape(run.regressions[0]) in html and f"/compare/{first.run.pk}/{run.pk}/" in html


def test_no_regression_flags_false_and_mails_nobody(lab, settings):
    settings.ADMINS = ADMINS
    schedule = nightly()
    scheduled_run(schedule_id=schedule.pk)
    lab.wrong = {"q1"}  # one broken example is noise, not a regression
    outcome = scheduled_run(schedule_id=schedule.pk)
    run = Run.objects.get(pk=outcome.run.pk)
    assert run.regression is False and run.regressions == [] and run.baseline_id is not None
    assert mail.outbox == []


def test_without_admins_a_regression_is_only_logged(lab, settings, caplog):
    settings.ADMINS = []
    schedule = nightly()
    scheduled_run(schedule_id=schedule.pk)
    lab.wrong = set(ALL_MATH)
    with caplog.at_level(logging.WARNING, logger="evaluation.schedules"):
        outcome = scheduled_run(schedule_id=schedule.pk)
    assert Run.objects.get(pk=outcome.run.pk).regression is True and not outcome.mailed
    assert mail.outbox == []
    assert any("regressed against" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_missing_disabled_or_broken_schedule_runs_nothing_and_says_why(lab, caplog):
    assert scheduled_run(schedule_id=987654) is None
    schedule = nightly(enabled=False)
    assert scheduled_run(schedule_id=schedule.pk) is None
    # the dataset was deleted after the schedule was saved
    EvalSchedule.objects.filter(pk=schedule.pk).update(enabled=True, dataset="gone")
    with caplog.at_level(logging.ERROR, logger="evaluation.schedules"):
        outcome = scheduled_run(schedule_id=schedule.pk)
    assert outcome.run is None and "gone" in (outcome.error or "")
    assert not Run.objects.exists()
    schedule.refresh_from_db()
    assert "gone" in schedule.last_error
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    # bad input is said in one line, without a traceback
    assert len(failed) == 1 and not failed[0].exc_info


def test_a_beat_entry_that_outlived_its_schedule_is_deleted_when_it_fires(lab, caplog):
    schedule = nightly()
    entry = PeriodicTask.objects.get(task=SCHEDULE_TASK)
    # beat saved the entry back while the schedule was being deleted
    EvalSchedule.objects.filter(pk=schedule.pk).delete()
    assert PeriodicTask.objects.filter(pk=entry.pk).exists()
    with caplog.at_level(logging.WARNING, logger="evaluation.schedules"):
        assert scheduled_run(schedule_id=schedule.pk) is None
    assert not PeriodicTask.objects.filter(task=SCHEDULE_TASK).exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"scheduled evaluation #{schedule.pk} does not exist (deleted?): nothing run; "
        "its beat entry is deleted too"
    ]


def test_free_slots_count_the_slots_not_held_by_scheduled_runs():
    queues = {"w1": [{"name": "turns"}], "w2": [{"name": "other"}]}
    stats = {"w1": {"pool": {"max-concurrency": 1}}, "w2": {"pool": {"max-concurrency": 8}}}
    following = {"w1": [{"name": SCHEDULE_TASK}]}
    assert (
        free_slots(
            queue="turns", active_queues=queues, stats=stats, active=following, follower_task=SCHEDULE_TASK
        )
        == 0
    )
    stats["w1"]["pool"]["max-concurrency"] = 4
    assert (
        free_slots(
            queue="turns", active_queues=queues, stats=stats, active=following, follower_task=SCHEDULE_TASK
        )
        == 3
    )
    assert (
        free_slots(queue="nobody", active_queues=queues, stats=stats, active={}, follower_task=SCHEDULE_TASK)
        == 0
    )
