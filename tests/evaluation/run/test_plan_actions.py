"""What a resumed run does with each (example, epoch) is one decision with a
name (``evaluation.run.plan.plan_action``), carried out by one writer per
action; a turn that cannot be resumed is never reported as resumed."""

from __future__ import annotations

import pytest
from django.utils import timezone

from evaluation.datasets.services import dataset_resolve
from evaluation.models import Prediction
from evaluation.run.lifecycle import run_start
from evaluation.run.plan import PlanAction, plan_action, run_plan
from turns.models import Turn, TurnEvent, TurnStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def planned_run():
    """A run of the demo dataset planned once (3 examples): each has a queued turn and an open row."""
    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="plan-actions", dataset=dataset, config={"model": "m"})
    planned, skipped = run_plan(run=run, limit=3, max_steps=2, model="m")
    assert skipped == 0 and [p.action for p in planned] == [PlanAction.FRESH] * 3
    assert not any(p.resumed for p in planned)
    return run, [Prediction.objects.select_related("turn").get(pk=p.prediction_id) for p in planned]


def _set(prediction: Prediction, **turn_fields) -> Prediction:
    assert prediction.turn_id is not None
    Turn.objects.filter(pk=prediction.turn_id).update(**turn_fields)
    return Prediction.objects.select_related("turn").get(pk=prediction.pk)


def test_each_state_of_a_row_and_its_turn_has_one_action(planned_run):
    _, (first, _, _) = planned_run
    assert plan_action(None, retry_errors=False, live_ok=False) == PlanAction.FRESH
    assert plan_action(first, retry_errors=False, live_ok=False) == PlanAction.KEEP  # queued: not resumable
    running = _set(first, status=TurnStatus.RUNNING, heartbeat_at=timezone.now())
    assert plan_action(running, retry_errors=False, live_ok=False) == PlanAction.RESUME
    assert plan_action(running, retry_errors=False, live_ok=True) == PlanAction.FOLLOW
    cancelling = _set(first, status=TurnStatus.RUNNING, cancel_requested=True)
    assert plan_action(cancelling, retry_errors=False, live_ok=False) == PlanAction.KEEP
    for status in (TurnStatus.INTERRUPTED, TurnStatus.FAILED):
        assert plan_action(_set(first, status=status), retry_errors=False, live_ok=False) == PlanAction.RESUME
    Prediction.objects.filter(pk=first.pk).update(completed_at=timezone.now(), error="HTTP 503")
    failed = _set(first, status=TurnStatus.FAILED)
    assert plan_action(failed, retry_errors=False, live_ok=False) == PlanAction.SKIP
    assert plan_action(failed, retry_errors=True, live_ok=False) == PlanAction.RETRY
    Prediction.objects.filter(pk=first.pk).update(error="")
    answered = _set(first, status=TurnStatus.SUCCEEDED)
    assert plan_action(answered, retry_errors=True, live_ok=False) == PlanAction.SKIP


def test_a_turn_that_cannot_be_resumed_is_never_reported_as_resumed(planned_run):
    run, (queued, cut_off, cancelling) = planned_run
    _set(cut_off, status=TurnStatus.RUNNING, attempts=1)
    _set(cancelling, status=TurnStatus.RUNNING, attempts=1, cancel_requested=True)
    planned, skipped = run_plan(run=run, limit=3, max_steps=2, model="m")
    by_turn = {p.turn_id: p for p in planned}
    assert skipped == 0 and len(planned) == 3
    # still queued: driven as it stands, not resumed
    assert (by_turn[queued.turn_id].action, by_turn[queued.turn_id].resumed) == (PlanAction.KEEP, False)
    # cut off by a killed process: interrupted, then resumed
    assert (by_turn[cut_off.turn_id].action, by_turn[cut_off.turn_id].resumed) == (PlanAction.RESUME, True)
    resumed = Turn.objects.get(pk=cut_off.turn_id)
    assert resumed.status == TurnStatus.QUEUED
    assert list(TurnEvent.objects.filter(turn=resumed).values_list("type", flat=True))[-2:] == [
        "turn.interrupted",
        "turn.resumed",
    ]
    # cut off with a cancel asked for: the interruption ends it cancelled, so it is not resumed
    assert (by_turn[cancelling.turn_id].action, by_turn[cancelling.turn_id].resumed) == (
        PlanAction.KEEP,
        False,
    )
    assert Turn.objects.get(pk=cancelling.turn_id).status == TurnStatus.CANCELLED
    assert not TurnEvent.objects.filter(turn_id=cancelling.turn_id, type="turn.resumed").exists()
