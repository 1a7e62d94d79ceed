"""A scheduled evaluation end to end (issue 17): django-celery-beat's real
``DatabaseScheduler`` ticks, finds the schedule's ``PeriodicTask`` due and
sends ``scheduled_eval_run`` over Redis to a real Celery worker started in
this process (``celery.contrib.testing.worker.start_worker``, threads pool),
which runs ``run_eval`` against a stub LLM, compares with the schedule's
previous run, flags the regression and mails ``ADMINS`` — into this
process's locmem outbox.

The worker reads a queue of its own (named after the test), so other
workers on the same Redis neither take our tasks nor give us theirs.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import after_task_publish, task_postrun
from django.core import mail
from django_celery_beat.schedulers import DatabaseScheduler

from agentlab.testing.net import port_open
from config.celery import app
from evaluation.models import Run
from evaluation.run import worker as eval_tasks
from evaluation.schedules.sync import SCHEDULE_TASK
from tests.evaluation.schedules.schedule_support import ALL_MATH, nightly, stub_lab
from tests.redis_support import BROKER_URL, REDIS
from turns.jobs import tasks as turn_tasks

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BROKER = BROKER_URL


@pytest.fixture
def worker(settings):
    """A Celery worker in this process on Redis with two slots, reading only
    its own queues: the one beat sends scheduled evaluations to
    (``AGENTLAB_SCHEDULE_QUEUE``) and ``<it>-turns`` for a celery schedule's turns."""
    if not port_open(*REDIS):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    queue = f"schedules-{uuid.uuid4().hex[:8]}"
    settings.CELERY_BROKER_URL = BROKER
    settings.AGENTLAB_SCHEDULE_QUEUE = queue
    saved = {k: app.conf[k] for k in ("broker_url", "task_default_queue", "worker_hijack_root_logger")}
    app.conf.update(broker_url=BROKER, task_default_queue=queue, worker_hijack_root_logger=False)
    try:
        with start_worker(
            app,
            pool="threads",
            concurrency=2,
            queues=[queue, f"{queue}-turns"],
            perform_ping_check=False,
            shutdown_timeout=60,
        ) as started:
            yield started
    finally:
        app.conf.update(saved)
        # the worker's event loop (its providers' HTTP sessions) and ORM
        # thread pool (eval_example_run) outlive its tasks by design; this
        # process goes on, so close them now
        eval_tasks._loop.close()
        if turn_tasks._db is not None:
            turn_tasks._db.close()
            turn_tasks._db = None


class Sent:
    """The scheduled-evaluation tasks beat published and the worker finished (signals)."""

    def __init__(self) -> None:
        self.published: list[dict] = []
        self.finished = 0
        after_task_publish.connect(self.on_publish, weak=False)
        task_postrun.connect(self.on_postrun, weak=False)

    def on_publish(self, sender=None, headers=None, body=None, **kwargs) -> None:
        if sender == SCHEDULE_TASK:
            self.published.append(body[1])  # (args, kwargs, embed)

    def on_postrun(self, sender=None, **kwargs) -> None:
        if sender is not None and sender.name == SCHEDULE_TASK:
            self.finished += 1

    def close(self) -> None:
        after_task_publish.disconnect(self.on_publish)
        task_postrun.disconnect(self.on_postrun)


@pytest.fixture
def beat():
    """django-celery-beat's scheduler as ``celery beat`` runs it, closed
    (its last sync done) while the test database still exists."""
    schedulers: list[DatabaseScheduler] = []

    def make() -> DatabaseScheduler:
        schedulers.append(DatabaseScheduler(app=app))
        return schedulers[-1]

    yield make
    for scheduler in schedulers:
        scheduler.close()


def beat_fires(scheduler: DatabaseScheduler, sent: Sent, *, count: int, timeout: float = 120) -> None:
    """Tick ``scheduler`` until it has published ``count`` scheduled tasks,
    then wait until the worker has finished them."""
    deadline = time.monotonic() + timeout
    while len(sent.published) < count:
        assert time.monotonic() < deadline, "beat never sent the scheduled evaluation"
        scheduler.tick()
        time.sleep(0.2)
    while sent.finished < count:
        assert time.monotonic() < deadline, "the worker never finished the scheduled evaluation"
        time.sleep(0.2)


def test_a_beat_scheduled_run_flags_a_regression_and_mails_the_admins(
    worker, beat, tmp_path, settings, caplog
):
    settings.ADMINS = [("Ops", "ops@example.com")]
    caplog.set_level(logging.INFO, logger="evaluation.schedules")
    sent = Sent()
    try:
        with stub_lab(tmp_path, settings) as oracle:
            schedule = nightly(every_s=1)
            scheduler = beat()
            beat_fires(scheduler, sent, count=1)
            first = Run.objects.get(schedule=schedule)
            assert first.status == "success" and first.regression is None and first.baseline_id is None
            assert mail.outbox == []

            oracle.wrong = set(ALL_MATH)
            beat_fires(scheduler, sent, count=2)
    finally:
        sent.close()
    assert sent.published == [{"schedule_id": schedule.pk}] * 2
    second = Run.objects.filter(schedule=schedule).exclude(pk=first.pk).get()
    assert second.status == "success"
    assert second.regression is True and second.baseline_id == first.pk
    assert second.regressions[0].startswith("overall: accuracy 1.000 → 0.250")
    assert any(line.startswith("task type 'math'") for line in second.regressions)
    first.refresh_from_db()
    assert first.regression is None

    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["ops@example.com"]
    assert message.subject == (
        "[AgentLab] Regression in scheduled evaluation nightly: "
        f"run {second.run_id} vs baseline {first.run_id}"
    )
    assert (
        second.regressions[0] in message.body and f"/admin/evaluation/run/{second.pk}/change/" in message.body
    )
    warnings = [
        r for r in caplog.records if r.name == "evaluation.schedules" and r.levelno == logging.WARNING
    ]
    assert [r.getMessage() for r in warnings] == [
        f"scheduled evaluation 'nightly': run {second.run_id} regressed against {first.run_id}: "
        + "; ".join(second.regressions)
    ]


def test_a_celery_schedule_whose_turns_no_free_slot_reads_is_refused_not_left_waiting(
    worker, beat, tmp_path, settings
):
    sent = Sent()
    try:
        with stub_lab(tmp_path, settings):
            schedule = nightly(every_s=1, celery=True, queue=f"nobody-{uuid.uuid4().hex[:8]}")
            beat_fires(beat(), sent, count=1)
    finally:
        sent.close()
    schedule.refresh_from_db()
    assert f"no free worker slot reads queue {schedule.queue!r}" in schedule.last_error
    assert not Run.objects.exists()


def test_a_celery_schedule_sends_its_turns_to_the_workers_and_follows_them(worker, beat, tmp_path, settings):
    sent = Sent()
    try:
        with stub_lab(tmp_path, settings):
            turns = f"{settings.AGENTLAB_SCHEDULE_QUEUE}-turns"
            schedule = nightly(every_s=1, celery=True, queue=turns)
            beat_fires(beat(), sent, count=1)
    finally:
        sent.close()
    run = Run.objects.get(schedule=schedule)
    assert run.status == "success" and run.metrics["correct"] == 16
    assert run.config["celery_queue"] == turns
    # every turn was driven by a worker task, not in the scheduled task's slot
    assert all(p.turn.job_id for p in run.predictions.select_related("turn"))
