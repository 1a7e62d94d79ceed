"""Writes for schedules (HackSoft "services"): a schedule and the
django-celery-beat ``PeriodicTask`` that fires it are saved and deleted
together, in one transaction, so beat never fires a schedule that is not
there nor misses one that is.

The admin calls these (``evaluation.admin.schedules``); nothing hooks
``save()`` or signals (CONTRIBUTING.md#models-hold-their-own-fields). A ``PeriodicTask`` deleted by hand in
beat's own admin leaves the schedule without one (``periodic_task`` is
``None``): saving the schedule again writes a new one.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django_celery_beat.models import PeriodicTask

from evaluation.models import EvalSchedule
from evaluation.schedules.options import schedule_check

#: The registered name of the task beat sends
#: (``evaluation.schedules.firing.scheduled_eval_run``; the name is older than
#: the module and is kept: beat's stored ``PeriodicTask`` rows name it).
SCHEDULE_TASK = "evaluation.schedules.tasks.scheduled_eval_run"


def periodic_task_kwargs(schedule_id: int) -> str:
    """The ``PeriodicTask.kwargs`` of schedule ``schedule_id`` (JSON text)."""
    return json.dumps({"schedule_id": schedule_id})


def periodic_task_name(schedule: EvalSchedule) -> str:
    """The ``PeriodicTask`` name of a saved schedule: unique by its pk, readable by its name."""
    return f"evaluation schedule #{schedule.pk}: {schedule.name}"[:200]


@transaction.atomic
def schedule_save(*, schedule: EvalSchedule) -> EvalSchedule:
    """Check ``schedule`` (``schedule_check``), save it and write its
    ``PeriodicTask``: task ``SCHEDULE_TASK``, kwargs ``{"schedule_id": pk}``,
    the schedule's crontab or interval, ``enabled`` as the schedule's, sent
    to ``AGENTLAB_SCHEDULE_QUEUE`` (``None``: Celery's default queue).

    Raises ``ValidationError`` (fields as keys) before anything is written."""
    schedule_check(schedule)
    schedule.save()
    task = schedule.periodic_task or PeriodicTask()
    task.name = periodic_task_name(schedule)
    task.task = SCHEDULE_TASK
    task.args = "[]"
    task.kwargs = periodic_task_kwargs(schedule.pk)
    task.crontab = schedule.crontab
    task.interval = schedule.interval
    task.solar = task.clocked = None
    task.one_off = False
    task.enabled = schedule.enabled
    task.queue = settings.AGENTLAB_SCHEDULE_QUEUE or None
    task.description = (
        f"Runs evaluation schedule {schedule.name!r}; edit it under Evaluation › Eval schedules."
    )
    task.save()  # django-celery-beat's save tells beat its schedule changed
    if schedule.periodic_task_id != task.pk:
        schedule.periodic_task = task
        schedule.save(update_fields=["periodic_task"])
    return schedule


@transaction.atomic
def schedule_delete(*, schedule: EvalSchedule) -> None:
    """Delete ``schedule`` and its ``PeriodicTask``; its runs stay (their
    ``schedule`` becomes ``None``)."""
    task_id = schedule.periodic_task_id
    schedule.delete()
    if task_id is not None:
        _periodic_tasks_delete(PeriodicTask.objects.filter(pk=task_id))


def schedule_orphans_delete(*, schedule_id: int) -> int:
    """Delete the beat entries of schedule ``schedule_id``, which no longer
    exists (beat saved its entry back while the schedule was being
    deleted); returns how many there were."""
    return _periodic_tasks_delete(
        PeriodicTask.objects.filter(task=SCHEDULE_TASK, kwargs=periodic_task_kwargs(schedule_id))
    )


def _periodic_tasks_delete(tasks: QuerySet[PeriodicTask]) -> int:
    # PeriodicTask.delete(), not a queryset delete: it tells beat
    found = list(tasks)
    for task in found:
        task.delete()
    return len(found)
