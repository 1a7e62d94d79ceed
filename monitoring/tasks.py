"""The Celery tasks of online evaluation (docs/monitoring.md): scoring one
(turn, evaluator), and comparing an evaluator's last window with the one
before (sent by its django-celery-beat entry, ``monitoring.sync``)."""

from __future__ import annotations

from celery import shared_task

#: The registered names beat's stored ``PeriodicTask`` rows and the sender use.
SCORE_TASK = "monitoring.tasks.online_score"
CHECK_TASK = "monitoring.tasks.online_windows_check"


@shared_task(name=SCORE_TASK, acks_late=True, ignore_result=True)
def online_score(turn_id: int, evaluator_id: int) -> str:
    """Score turn ``turn_id`` with evaluator ``evaluator_id`` (idempotent:
    ``monitoring.scoring.online_score_turn``); returns what it did."""
    from monitoring.scoring import online_score_turn

    return online_score_turn(turn_id=turn_id, evaluator_id=evaluator_id).status


@shared_task(name=CHECK_TASK, ignore_result=True)
def online_windows_check(evaluator_id: int) -> str:
    """Compare evaluator ``evaluator_id``'s last complete window with the one
    before (``monitoring.alerts.evaluator_check``); returns what it found."""
    from monitoring.alerts import evaluator_check

    return evaluator_check(evaluator_id=evaluator_id).status
