"""From the signal to the job: with a broker the Celery task is sent, one per
sampled evaluator; a receiver that raises never reaches the turn."""

from __future__ import annotations

import logging

import pytest

from monitoring import dispatch
from monitoring.sampling import sampled
from monitoring.tasks import online_score
from tests.monitoring.support import evaluator
from turns.signals import chat_turn_finished, chat_turn_finished_send

pytestmark = pytest.mark.django_db


def test_with_a_broker_each_sampled_evaluator_gets_a_task(settings, monkeypatch):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/15"
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(
        online_score, "delay", lambda turn_id, evaluator_id: sent.append((turn_id, evaluator_id))
    )
    every = evaluator("every", sampling_rate=1.0)
    half = evaluator("half", sampling_rate=0.5)
    evaluator("off", sampling_rate=1.0, enabled=False)
    dispatch.evaluators_cache_clear()

    for turn_id in range(1, 41):
        chat_turn_finished_send(turn_id)
    expected = [
        (t, e.pk)
        for t in range(1, 41)
        for e in (every, half)
        if sampled(evaluator_id=e.pk, turn_id=t, rate=e.sampling_rate)
    ]
    assert sorted(sent) == sorted(expected)
    assert len([s for s in sent if s[1] == every.pk]) == 40


def test_a_receiver_that_raises_is_logged_not_raised(caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver broke")

    chat_turn_finished.connect(broken, dispatch_uid="test.broken")
    try:
        with caplog.at_level(logging.ERROR, logger="turns.signals"):
            chat_turn_finished_send(12)
    finally:
        chat_turn_finished.disconnect(dispatch_uid="test.broken")
    assert "a chat_turn_finished receiver failed for turn 12: RuntimeError('receiver broke')" in caplog.text
