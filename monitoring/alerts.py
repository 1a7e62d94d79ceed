"""The periodic check of an online evaluator: its last complete window
against the one before, the flag, the WARNING and the mail to ``ADMINS``
(docs/monitoring.md#trend-and-alert) — told as scheduled evaluations tell a
regression (``evaluation.schedules.alerts``: logger, ``mail_admins``, a mail
that cannot be sent logged and never raised)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.mail import mail_admins
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from monitoring.drift import WindowComparison, compare_windows
from monitoring.models import OnlineEvaluator
from monitoring.windows import WindowCounts, feedback_windows, score_windows, window_floor, window_length

logger = logging.getLogger("monitoring")


@dataclass(frozen=True)
class CheckOutcome:
    """What one check did: ``status`` is ``drop`` (flagged), ``steady``,
    ``too few``, ``checked`` (that window was compared before) or
    ``no evaluator``; the ``comparison`` made and whether ``ADMINS`` were ``mailed``."""

    status: str
    comparison: WindowComparison | None = None
    mailed: bool = False
    #: the end users' thumbs-up share compared alike (docs/monitoring.md#feedback)
    feedback: WindowComparison | None = None


#: What each comparison of a check measures, as its line says it.
PASS_RATE = "pass rate"
THUMBS_UP = "thumbs-up share"


def drop_body(
    evaluator: OnlineEvaluator, comparison: WindowComparison, window_start: datetime, what: str = PASS_RATE
) -> str:
    """The mail's text: the evaluator, the window, what dropped (``what``),
    the figures and its trend page's path."""
    return "\n".join(
        [
            f"Online evaluator {evaluator.name!r} ({evaluator.window} windows, alpha {evaluator.alpha}):",
            f"in the window starting {window_start:%Y-%m-%d %H:%M} UTC its {what} "
            + ("(end users' feedback) " if what == THUMBS_UP else "")
            + "is significantly worse than in the one before.",
            "",
            f"- {comparison.describe(what)}",
            "",
            f"Trend: {reverse('admin:monitoring_onlineevaluator_trend', args=[evaluator.pk])}",
        ]
    )


def drop_alert(
    evaluator: OnlineEvaluator, comparison: WindowComparison, window_start: datetime, what: str = PASS_RATE
) -> bool:
    """Log the drop (of ``what``) at WARNING and mail ``ADMINS`` (when set);
    returns whether a mail was sent. A mail that cannot be sent is logged at ERROR."""
    logger.warning("online evaluator %r dropped: %s", evaluator.name, comparison.describe(what))
    if not settings.ADMINS:
        return False
    try:
        mail_admins(
            f"Online evaluator {evaluator.name} dropped: {comparison.describe(what)}"[:250],
            drop_body(evaluator, comparison, window_start, what),
        )
    except Exception:
        logger.exception("online evaluator %r: could not mail ADMINS about its drop", evaluator.name)
        return False
    return True


def evaluator_check(*, evaluator_id: int, now: datetime | None = None) -> CheckOutcome:
    """Compare evaluator ``evaluator_id``'s last complete window before
    ``now`` (default: the current time) with the one before it, once per
    window (``last_checked_window``: a second firing in the same window
    does nothing, so nobody is mailed twice). On a significant drop
    (``monitoring.drift.compare_windows``) set ``flagged``, ``flagged_at``
    and ``flag_reason``, log a WARNING and mail ``ADMINS``. A flag stays
    until someone clears it in the admin. Raises nothing for a missing or
    disabled evaluator (``no evaluator``)."""
    now = now or timezone.now()
    with transaction.atomic():
        evaluator = OnlineEvaluator.objects.select_for_update().filter(pk=evaluator_id, enabled=True).first()
        if evaluator is None:
            return CheckOutcome("no evaluator")
        length = window_length(evaluator.window)
        last_start = window_floor(now, evaluator.window) - length
        if evaluator.last_checked_window is not None and evaluator.last_checked_window >= last_start:
            return CheckOutcome("checked")
        comparisons = _comparisons(evaluator, last_start)
        evaluator.last_checked_window = last_start
        evaluator.last_check = f"{last_start:%Y-%m-%d %H:%M} UTC: " + "; ".join(
            f"{c.verdict}; {c.describe(what)}" for what, c in comparisons
        )
        fields = ["last_checked_window", "last_check"]
        dropped = [(what, c) for what, c in comparisons if c.verdict == "drop"]
        if dropped:
            evaluator.flagged, evaluator.flagged_at = True, now
            evaluator.flag_reason = evaluator.last_check
            fields += ["flagged", "flagged_at", "flag_reason"]
        evaluator.save(update_fields=fields)
    mailed = [drop_alert(evaluator, c, last_start, what) for what, c in dropped]
    score, feedback = comparisons[0][1], comparisons[1][1]
    return CheckOutcome("drop" if dropped else score.verdict, score, any(mailed), feedback)


def _compare(previous: WindowCounts, last: WindowCounts, evaluator: OnlineEvaluator) -> WindowComparison:
    return compare_windows(
        k1=last.passed,
        n1=last.n,
        k0=previous.passed,
        n0=previous.n,
        alpha=evaluator.alpha,
        min_count=evaluator.min_count,
    )


def _comparisons(evaluator: OnlineEvaluator, last_start: datetime) -> list[tuple[str, WindowComparison]]:
    """The last complete window against the one before, for the evaluator's
    pass rate and for the end users' thumbs-up share on the same turns."""
    length = window_length(evaluator.window)
    since, until = last_start - length, last_start + length
    previous, last = score_windows(evaluator, since=since, until=until)
    rated_before, rated_last = feedback_windows(evaluator, since=since, until=until)
    return [
        (PASS_RATE, _compare(previous, last, evaluator)),
        (THUMBS_UP, _compare(rated_before, rated_last, evaluator)),
    ]
