"""The periodic check: the last complete window against the one before — a
real drop flags the evaluator, logs a WARNING and mails ADMINS once; noise
and small windows stay quiet; the beat entry is written with the evaluator."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django_celery_beat.models import PeriodicTask

from monitoring.alerts import evaluator_check
from monitoring.sync import evaluator_delete
from monitoring.tasks import CHECK_TASK, online_windows_check
from tests.monitoring.support import evaluator, score_at

pytestmark = pytest.mark.django_db

ADMINS = [("Ops", "ops@example.com")]
#: 10:20 UTC: the last complete daily window is 3 Dec, the one before 2 Dec
NOW = datetime(2026, 12, 4, 10, 20, tzinfo=UTC)
LAST = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
BEFORE = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def fill(ev, owner, when, passed: int, failed: int) -> None:
    for i in range(passed + failed):
        score_at(ev, owner, when + timedelta(seconds=i), passed=i < passed)


def test_a_real_drop_flags_logs_and_mails_once(owner, settings, caplog):
    settings.ADMINS = ADMINS
    ev = evaluator("answers", min_count=30)
    fill(ev, owner, BEFORE, passed=45, failed=5)  # 90 %
    fill(ev, owner, LAST, passed=30, failed=20)  # 60 %
    fill(ev, owner, NOW - timedelta(minutes=5), passed=0, failed=10)  # the window still open: not counted

    with caplog.at_level(logging.WARNING, logger="monitoring"):
        outcome = evaluator_check(evaluator_id=ev.pk, now=NOW)
    assert (outcome.status, outcome.mailed) == ("drop", True)
    assert (outcome.comparison.k1, outcome.comparison.n1, outcome.comparison.k0, outcome.comparison.n0) == (
        30,
        50,
        45,
        50,
    )
    ev.refresh_from_db()
    assert ev.flagged and ev.flagged_at == NOW
    assert ev.flag_reason.startswith("2026-12-03 00:00 UTC: drop; pass rate 30/50 (60.0%) vs 45/50 (90.0%)")
    assert ev.last_checked_window == datetime(2026, 12, 3, tzinfo=UTC)
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "online evaluator 'answers' dropped" in record.getMessage()
    (message,) = mail.outbox
    assert message.to == ["ops@example.com"]
    assert message.subject.endswith(
        "Online evaluator answers dropped: pass rate 30/50 (60.0%) vs 45/50 (90.0%) in the window before; "
        "difference -30.0%, interval [-44.9%, -13.2%]"
    )
    assert f"/admin/monitoring/onlineevaluator/{ev.pk}/trend/" in message.body

    # beat fires again within the same day: that window was compared, nobody is mailed twice
    assert evaluator_check(evaluator_id=ev.pk, now=NOW + timedelta(hours=1)).status == "checked"
    assert len(mail.outbox) == 1


def test_noise_stays_quiet(owner, settings):
    settings.ADMINS = ADMINS
    ev = evaluator("noisy", min_count=30)
    fill(ev, owner, BEFORE, passed=40, failed=10)  # 80 %
    fill(ev, owner, LAST, passed=37, failed=13)  # 74 %
    outcome = evaluator_check(evaluator_id=ev.pk, now=NOW)
    assert (outcome.status, outcome.mailed) == ("steady", False)
    ev.refresh_from_db()
    assert not ev.flagged and mail.outbox == []
    assert ev.last_check.startswith("2026-12-03 00:00 UTC: steady; pass rate 37/50 (74.0%)")


def test_small_windows_stay_quiet(owner, settings):
    settings.ADMINS = ADMINS
    ev = evaluator("small", min_count=30)
    fill(ev, owner, BEFORE, passed=20, failed=0)
    fill(ev, owner, LAST, passed=0, failed=20)  # a drop from 100 % to 0 %, but 20 < 30 each
    assert evaluator_check(evaluator_id=ev.pk, now=NOW).status == "too few"
    ev.refresh_from_db()
    assert not ev.flagged and mail.outbox == []


def test_hourly_windows_and_the_celery_task(owner, settings):
    settings.ADMINS = ADMINS
    ev = evaluator("hourly", window="hourly", min_count=20)
    fill(ev, owner, datetime(2026, 12, 4, 8, 10, tzinfo=UTC), passed=25, failed=0)
    fill(ev, owner, datetime(2026, 12, 4, 9, 10, tzinfo=UTC), passed=5, failed=20)
    # the task reads the clock: compare at the real "now" by moving the scores' hours instead
    assert evaluator_check(evaluator_id=ev.pk, now=NOW).status == "drop"
    assert len(mail.outbox) == 1
    assert online_windows_check.apply(kwargs={"evaluator_id": 999_999}).result == "no evaluator"


def test_without_admins_it_logs_and_sends_no_mail(owner, settings):
    settings.ADMINS = []
    ev = evaluator("nobody", min_count=30)
    fill(ev, owner, BEFORE, passed=45, failed=5)
    fill(ev, owner, LAST, passed=30, failed=20)
    outcome = evaluator_check(evaluator_id=ev.pk, now=NOW)
    assert (outcome.status, outcome.mailed) == ("drop", False) and mail.outbox == []


def test_the_beat_entry_is_saved_and_deleted_with_the_evaluator():
    ev = evaluator("beat", window="hourly")
    task = PeriodicTask.objects.get(pk=ev.periodic_task_id)
    assert (task.task, task.kwargs, task.enabled) == (CHECK_TASK, f'{{"evaluator_id": {ev.pk}}}', True)
    assert (task.crontab.minute, task.crontab.hour, str(task.crontab.timezone)) == ("5", "*", "UTC")
    ev.window, ev.enabled = "daily", False
    from monitoring.sync import evaluator_save

    evaluator_save(evaluator=ev)
    task.refresh_from_db()
    assert (task.crontab.hour, task.enabled) == ("0", False)
    evaluator_delete(evaluator=ev)
    assert not PeriodicTask.objects.filter(pk=task.pk).exists()
