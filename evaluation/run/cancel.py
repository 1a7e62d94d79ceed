"""Cancelling a run: ``manage.py cancel_run ID`` (a ``run_eval --celery``
run's turns run on workers, and Ctrl-C of ``run_eval`` leaves them running)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from django.contrib.auth.models import User

from common.errors import NotFound, StateConflict
from evaluation.models import Prediction, Run, RunStatus
from evaluation.run.conversation_drive import conversation_complete
from evaluation.run.conversation_score import ConversationEnd
from evaluation.run.lifecycle import run_finish
from evaluation.run.record import prediction_record
from evaluation.selectors import run_lease_holder
from turns.models import ACTIVE_STATUSES, TERMINAL_STATUSES, Turn, TurnStatus
from turns.services import turn_cancel


@dataclass(frozen=True)
class RunCancelResult:
    """What ``run_cancel`` did: ``cancelled``, the run's open turns that are
    now cancelled or asked to stop (queued or interrupted ones ended at once,
    running ones within ``CANCEL_POLL_S`` by their driver; those the
    following ``run_eval`` cancelled first are counted too), and ``followed``: a ``run_eval`` holds the
    run's lease and finishes it (else it was finished here)."""

    run: Run
    cancelled: int
    followed: bool


def run_cancel(*, run_id: str, acting_user: User | None = None) -> RunCancelResult:
    """Cancel the remaining turns of run ``run_id`` and mark it ``cancelled``.

    Every turn of the run's open predictions that is queued, running, waiting
    or interrupted is cancelled (``turn_cancel``). When a ``run_eval`` follows
    the run (a live lease) it sees the status, waits for the turns to end and
    finishes the run as ``cancelled``; otherwise the predictions whose turns
    ended are completed here and the run finished as ``cancelled`` (a later
    ``run_eval --run-id ID --retry-errors`` runs them again). Raises
    ``NotFound`` for an unknown run id, and ``StateConflict`` (nothing
    changed) for a run that has finished and has no turn left to cancel: a
    finished run keeps its status (a ``success`` stays a baseline).
    """
    run = Run.objects.select_related("dataset").filter(run_id=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    open_turns = list(
        Prediction.objects.filter(
            run=run, completed_at__isnull=True, turn__status__in=[*ACTIVE_STATUSES, TurnStatus.INTERRUPTED]
        ).values_list("turn_id", flat=True)
    )
    if run.status != RunStatus.STARTED and not open_turns:
        raise StateConflict(
            f"run {run.run_id!r} has finished ({run.status}) and has no turn left to cancel: nothing changed"
        )
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    for turn_id in open_turns:
        # a turn that finished meanwhile, or that the run_eval following the
        # run cancelled first (it cancels queued turns once it sees the status)
        with contextlib.suppress(StateConflict):
            turn_cancel(turn_id=turn_id, acting_user=acting_user)
    # counted from the turns, not from this loop: the follower may have ended
    # some of them before the loop reached them, and the run counts those too
    cancelled = (
        Turn.objects.filter(pk__in=open_turns, cancel_requested=True)
        .exclude(status__in=[TurnStatus.SUCCEEDED, TurnStatus.FAILED])
        .count()
    )
    followed = run_lease_holder(run=run) is not None
    if not followed:
        ended = Prediction.objects.filter(
            run=run, completed_at__isnull=True, turn__status__in=TERMINAL_STATUSES
        ).select_related("example")
        for prediction in list(ended):
            if prediction.conversation_id is not None:
                # a conversation ends with the run: scored on the turns it had
                end = ConversationEnd("cancelled", "the run was cancelled")
                conversation_complete(prediction_id=prediction.pk, example=prediction.example, end=end)
            else:
                prediction_record(prediction_id=prediction.pk)
        run = run_finish(run=run, status=RunStatus.CANCELLED)
    else:
        run.refresh_from_db()
    return RunCancelResult(run=run, cancelled=cancelled, followed=followed)
