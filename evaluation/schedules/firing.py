"""One firing of a schedule (``scheduled_run``): the same ``run_eval``
service as ``manage.py run_eval``, then the comparison with the schedule's
previous successful run and the regression flag on the run.

Called by :func:`scheduled_eval_run`, the Celery task beat sends (it runs in
a worker; beat only sends it). No retries and no late acknowledgement: a
redelivery would run the whole evaluation again, and the next firing is the
retry. Nothing here raises for a bad schedule or
a failed evaluation: a Celery retry would run the whole evaluation again, so
every failure is logged (logger ``evaluation.schedules``) and kept in the
schedule's ``last_error``, and a run that had started is finished with status
``error`` by ``run_eval`` itself.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field, replace

from celery import shared_task
from django.core.exceptions import ValidationError
from django.db import connections
from django.utils import timezone

from common.errors import AgentLabError
from evaluation.compare.pairing import regressions
from evaluation.compare.selectors import schedule_previous_run
from evaluation.compare.services import run_compare
from evaluation.datasets.jsonl import DatasetFormatError
from evaluation.experiments.experiment_file import experiment_spec
from evaluation.experiments.runner import run_experiment
from evaluation.models import BaselinePolicy, EvalSchedule, Run, RunStatus
from evaluation.run.evaluate import run_eval
from evaluation.run.exits import RunOutage
from evaluation.run.lifecycle import run_regression_record
from evaluation.schedules.alerts import regression_alert
from evaluation.schedules.capacity import capacity_problem
from evaluation.schedules.options import schedule_request, schedule_run_id
from evaluation.schedules.sync import SCHEDULE_TASK, schedule_orphans_delete

logger = logging.getLogger("evaluation.schedules")


class ScheduleRefused(Exception):
    """The schedule cannot fire as it is (its message says why and what to change)."""


@dataclass(frozen=True)
class ScheduledOutcome:
    """What one firing did: the ``run`` (``None`` when none was started), the
    ``baseline`` it was compared with (``None``: not compared), the
    significant ``regressions`` found, whether ``ADMINS`` were ``mailed``, and
    ``error``: why the firing failed, or ``None``."""

    run: Run | None
    baseline: Run | None = None
    regressions: list[str] = field(default_factory=list)
    mailed: bool = False
    error: str | None = None
    #: a schedule running an experiment file: every variant's outcome
    variants: list[ScheduledOutcome] = field(default_factory=list)


class _NoProgress:
    """``run_eval``'s progress bar in a worker: the log has the plan line."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _note(text: str) -> None:
    logger.info("%s", text)


def scheduled_run(*, schedule_id: int) -> ScheduledOutcome | None:
    """Fire schedule ``schedule_id``: ``None`` when it does not exist or is
    disabled (logged); otherwise the run it started, linked to the schedule,
    compared with the schedule's previous successful run on the same dataset
    (``BaselinePolicy.PREVIOUS``) and flagged (``Run.regression``; ``None``
    when there was nothing to compare with or the run did not succeed). A
    regression is logged at WARNING and mailed to ``ADMINS`` (``alerts``).

    Raises nothing on purpose (see the module docstring)."""
    schedule = EvalSchedule.objects.select_related("crontab", "interval").filter(pk=schedule_id).first()
    if schedule is None:
        # its beat entry outlived it (beat saved the entry back while it was
        # being deleted): delete it, or it fires every period for ever
        orphans = schedule_orphans_delete(schedule_id=schedule_id)
        logger.warning(
            "scheduled evaluation #%s does not exist (deleted?): nothing run; %s",
            schedule_id,
            "its beat entry is deleted too" if orphans else "it has no beat entry left",
        )
        return None
    if not schedule.enabled:
        logger.info("scheduled evaluation %r is disabled: nothing run", schedule.name)
        return None
    if schedule.experiment_file.strip():
        return scheduled_experiment(schedule)
    run_id = schedule_run_id(schedule)
    try:
        request = schedule_request(schedule, run_id=run_id)
        if request.celery:
            problem = capacity_problem(queue=request.queue, follower_task=SCHEDULE_TASK)
            if problem:
                raise ScheduleRefused(problem)
        result = run_eval(request=request, note=_note, progress=lambda run_id, total: _NoProgress())
    except Exception as exc:
        # bad input and refusals are said in one line; anything else with its traceback
        expected = isinstance(
            exc,
            ValidationError | ScheduleRefused | ValueError | AgentLabError | DatasetFormatError | RunOutage,
        )
        message = (
            "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc) or type(exc).__name__
        )
        logger.error("scheduled evaluation %r failed: %s", schedule.name, message, exc_info=not expected)
        EvalSchedule.objects.filter(pk=schedule.pk).update(last_error=message[:2000])
        # a run that had started was finished with status error by run_eval
        Run.objects.filter(run_id=run_id).update(schedule=schedule)
        return ScheduledOutcome(run=Run.objects.filter(run_id=run_id).first(), error=message)
    EvalSchedule.objects.filter(pk=schedule.pk).update(last_error="")
    run = result.run
    run.schedule = schedule
    run.save(update_fields=["schedule"])
    return scheduled_compare(schedule=schedule, run=run)


def scheduled_experiment(schedule: EvalSchedule) -> ScheduledOutcome:
    """Fire a schedule that runs an experiment file: the file's experiment
    under a name of its own per firing (``<name> <UTC time> <random>``, so its
    variants make new runs), each variant's run linked to the schedule and
    compared with that variant's previous run of the schedule
    (``scheduled_compare``). The outcome's ``run`` is the first variant's;
    ``variants`` holds every variant's outcome. Raises nothing."""
    try:
        spec = experiment_spec(schedule.experiment_file.strip())
        # a name of its own per firing (the random part keeps two firings in one second apart)
        spec = replace(spec, name=f"{spec.name[:75]} {timezone.now():%Y-%m-%d %H%M%S} {secrets.token_hex(2)}")
        result = run_experiment(spec, note=_note, progress=lambda run_id, total: _NoProgress())
    except Exception as exc:
        expected = isinstance(exc, ValueError | AgentLabError | DatasetFormatError | RunOutage)
        message = str(exc) or type(exc).__name__
        logger.error("scheduled experiment %r failed: %s", schedule.name, message, exc_info=not expected)
        EvalSchedule.objects.filter(pk=schedule.pk).update(last_error=message[:2000])
        return ScheduledOutcome(run=None, error=message)
    EvalSchedule.objects.filter(pk=schedule.pk).update(last_error="")
    outcomes = []
    for variant in result.variants:
        if variant.run is None:
            continue
        Run.objects.filter(pk=variant.run.pk).update(schedule=schedule)
        variant.run.schedule = schedule
        outcomes.append(scheduled_compare(schedule=schedule, run=variant.run))
    first = outcomes[0] if outcomes else ScheduledOutcome(run=None)
    return replace(first, variants=outcomes)


def scheduled_compare(*, schedule: EvalSchedule, run: Run) -> ScheduledOutcome:
    """Compare ``run`` (of ``schedule``) with the schedule's previous
    successful run and store the flag; alert on a significant regression.
    Nothing is compared for a run that did not succeed, under
    ``BaselinePolicy.NONE``, or when there is no previous run."""
    if run.status != RunStatus.SUCCESS or schedule.baseline_policy == BaselinePolicy.NONE:
        if run.status != RunStatus.SUCCESS:
            logger.warning(
                "scheduled evaluation %r: run %s ended %s: not compared",
                schedule.name,
                run.run_id,
                run.status,
            )
        return ScheduledOutcome(run=run)
    baseline = schedule_previous_run(run=run)
    if baseline is None:
        logger.info("scheduled evaluation %r: run %s is its first: not compared", schedule.name, run.run_id)
        return ScheduledOutcome(run=run)
    found = regressions(run_compare(base=baseline, candidate=run), alpha=schedule.alpha)
    run = run_regression_record(run=run, baseline=baseline, regressions=found)
    mailed = False
    if found:
        mailed = regression_alert(schedule=schedule, run=run, baseline=baseline, regressions=found)
    else:
        logger.info("scheduled evaluation %r: run %s: no significant regression", schedule.name, run.run_id)
    return ScheduledOutcome(run=run, baseline=baseline, regressions=found, mailed=mailed)


@shared_task(name=SCHEDULE_TASK, ignore_result=True, acks_late=False, max_retries=0)
def scheduled_eval_run(schedule_id: int) -> None:
    """Fire evaluation schedule ``schedule_id`` (an id, never a model instance)."""
    try:
        scheduled_run(schedule_id=schedule_id)
    finally:
        # hours pass between firings: a connection kept in this thread would be long dead
        connections.close_all()
