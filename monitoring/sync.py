"""Writes for online evaluators: an evaluator and the django-celery-beat
``PeriodicTask`` that checks its windows are saved and deleted together, in
one transaction, as ``evaluation.schedules.sync`` does for schedules
(docs/monitoring.md#trend-and-alert). The admin calls these."""

from __future__ import annotations

import json

from django.db import transaction
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from monitoring.dispatch import evaluators_cache_clear
from monitoring.models import OnlineEvaluator, Window
from monitoring.tasks import CHECK_TASK

#: Minutes past the window's end the check runs (late turns are counted).
CHECK_DELAY_MIN = 5


def check_crontab(window: str) -> CrontabSchedule:
    """The crontab (UTC) of a window's check: hourly at minute 5, or daily at 00:05."""
    hour = "*" if window == Window.HOURLY else "0"
    crontab, _ = CrontabSchedule.objects.get_or_create(
        minute=str(CHECK_DELAY_MIN),
        hour=hour,
        day_of_week="*",
        day_of_month="*",
        month_of_year="*",
        timezone="UTC",
    )
    return crontab


@transaction.atomic
def evaluator_save(*, evaluator: OnlineEvaluator) -> OnlineEvaluator:
    """Check and save ``evaluator`` (``full_clean``: ``ValidationError`` with
    the fields as keys before anything is written) and write its beat entry:
    task ``monitoring.tasks.online_windows_check`` with ``{"evaluator_id":
    pk}`` on :func:`check_crontab`, enabled as the evaluator is."""
    evaluator.full_clean()
    evaluator.save()
    task = evaluator.periodic_task or PeriodicTask()
    task.name = f"online evaluator #{evaluator.pk}: {evaluator.name}"[:200]
    task.task = CHECK_TASK
    task.args = "[]"
    task.kwargs = json.dumps({"evaluator_id": evaluator.pk})
    task.crontab = check_crontab(evaluator.window)
    task.interval = task.solar = task.clocked = None
    task.one_off = False
    task.enabled = evaluator.enabled
    task.description = f"Compares online evaluator {evaluator.name!r}'s last window with the one before."
    task.save()
    if evaluator.periodic_task_id != task.pk:
        evaluator.periodic_task = task
        evaluator.save(update_fields=["periodic_task"])
    transaction.on_commit(evaluators_cache_clear)
    return evaluator


@transaction.atomic
def evaluator_delete(*, evaluator: OnlineEvaluator) -> None:
    """Delete ``evaluator``, its scores and its beat entry."""
    task_id = evaluator.periodic_task_id
    evaluator.delete()
    for task in PeriodicTask.objects.filter(pk=task_id):
        task.delete()  # one by one: PeriodicTask.delete() tells beat
    transaction.on_commit(evaluators_cache_clear)
