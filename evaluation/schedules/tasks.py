"""The Celery task beat sends for a schedule (``evaluation.schedules.sync``
writes the ``PeriodicTask`` naming it). Thin by design: the work is
``evaluation.schedules.firing.scheduled_run``.

Found by the workers through ``agentlab.celery`` (``autodiscover_tasks``
over ``evaluation.schedules``). No retries and no late acknowledgement: a
redelivery would run the whole evaluation again, and the next firing is the
retry. With the schedule's ``celery`` option the task follows its turns
from its own slot; ``evaluation.schedules.capacity`` refuses a firing that
no other slot could serve.
"""

from __future__ import annotations

from celery import shared_task
from django.db import connections

from evaluation.schedules.firing import scheduled_run
from evaluation.schedules.sync import SCHEDULE_TASK


@shared_task(name=SCHEDULE_TASK, ignore_result=True, acks_late=False, max_retries=0)
def scheduled_eval_run(schedule_id: int) -> None:
    """Fire evaluation schedule ``schedule_id`` (an id, never a model instance)."""
    try:
        scheduled_run(schedule_id=schedule_id)
    finally:
        # hours pass between firings: a connection kept in this thread would be long dead
        connections.close_all()
