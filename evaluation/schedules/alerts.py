"""Telling people of a regression in a scheduled run: a WARNING log line
(logger ``evaluation.schedules``) always, and an e-mail to ``ADMINS``
through Django's mail settings (``EMAIL_URL``) when ``ADMINS`` is set."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import mail_admins
from django.urls import reverse

from evaluation.models import EvalSchedule, Run

logger = logging.getLogger("evaluation.schedules")


def regression_subject(*, schedule: EvalSchedule, run: Run, baseline: Run) -> str:
    """The e-mail's subject (one line; ``EMAIL_SUBJECT_PREFIX`` goes before it)."""
    text = (
        f"Regression in scheduled evaluation {schedule.name}: run {run.run_id} vs baseline {baseline.run_id}"
    )
    return " ".join(text.split())


def regression_body(*, schedule: EvalSchedule, run: Run, baseline: Run, regressions: list[str]) -> str:
    """The e-mail's text: what regressed, one line each, and the admin paths
    of the run and of its comparison with the baseline."""
    return "\n".join(
        [
            f"Scheduled evaluation {schedule.name!r} on dataset {run.dataset.name!r}:",
            f"run {run.run_id} is significantly worse than the schedule's previous run "
            f"{baseline.run_id} (alpha {schedule.alpha}).",
            "",
            *(f"- {line}" for line in regressions),
            "",
            f"Run: {reverse('admin:evaluation_run_change', args=[run.pk])}",
            f"Comparison: {reverse('admin:evaluation_run_compare', args=[baseline.pk, run.pk])}",
        ]
    )


def regression_alert(*, schedule: EvalSchedule, run: Run, baseline: Run, regressions: list[str]) -> bool:
    """Log the regression at WARNING and mail ``ADMINS`` (when set); returns
    whether a mail was sent. A mail that cannot be sent (SMTP down) is
    logged at ERROR and does not fail the run."""
    logger.warning(
        "scheduled evaluation %r: run %s regressed against %s: %s",
        schedule.name,
        run.run_id,
        baseline.run_id,
        "; ".join(regressions),
    )
    if not settings.ADMINS:
        return False
    try:
        mail_admins(
            regression_subject(schedule=schedule, run=run, baseline=baseline),
            regression_body(schedule=schedule, run=run, baseline=baseline, regressions=regressions),
        )
    except Exception:
        logger.exception(
            "scheduled evaluation %r: could not mail ADMINS about run %s", schedule.name, run.run_id
        )
        return False
    return True
