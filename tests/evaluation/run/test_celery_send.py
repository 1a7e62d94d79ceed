"""``evaluation.run.on_workers.eval_send``: prediction ids in messages of
``AGENTLAB_EVAL_BATCH``, sent once the transaction commits."""

from __future__ import annotations

import pytest
from django.db import transaction

from evaluation.run import on_workers as celery_run
from evaluation.run.worker import eval_example_run


@pytest.fixture
def sent(monkeypatch):
    messages: list[tuple[tuple, str]] = []
    monkeypatch.setattr(
        eval_example_run,
        "apply_async",
        lambda args, queue: messages.append((args, queue)),
    )
    return messages


@pytest.mark.django_db(transaction=True)
def test_ids_go_in_batches_after_the_commit(sent, settings):
    settings.AGENTLAB_EVAL_BATCH = 3
    with transaction.atomic():
        celery_run.eval_send([1, 2, 3, 4, 5, 6, 7], queue="q")
        assert sent == []  # not before the commit: a worker must find the turns
    assert sent == [(([1, 2, 3],), "q"), (([4, 5, 6],), "q"), (([7],), "q")]


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_one_sends_each_id_alone(sent):
    celery_run.eval_send([8, 9], queue="q", batch=1)
    assert sent == [(([8],), "q"), (([9],), "q")]
