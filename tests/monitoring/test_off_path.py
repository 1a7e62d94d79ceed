"""Online scoring runs off the turn's path: a real chat turn on the stub
endpoint, driven by the inline executor, is answered — its ``turn.answered``
event committed and readable — while its scoring is still held back; the
score comes after, from the job the commit started. With no evaluator the
turn sends nothing anyone acts on."""

from __future__ import annotations

import threading
import time

import pytest

from agentlab.testing.stub_llm import StubLLMServer, final_answer_handler
from monitoring import dispatch, scoring
from monitoring.models import OnlineScore
from tests.monitoring.support import evaluator
from turns.jobs import handover as jobs
from turns.models import Conversation, Turn, TurnEvent
from turns.services import turn_start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("stream_settings")]


def wait_for(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def stub_chat(settings):
    with StubLLMServer(final_answer_handler()) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-model"
        settings.CELERY_BROKER_URL = ""
        previous = jobs.inline_executor_reset(jobs.InlineExecutor(sweep_every_s=0).start())
        assert previous is None
        yield stub


def test_the_answer_is_committed_before_the_online_score_exists(owner, stub_chat, monkeypatch):
    ev = evaluator(max_steps=4)
    release, entered = threading.Event(), threading.Event()
    real = scoring.turn_results

    def held(evaluator, turn):
        entered.set()
        assert release.wait(20)
        return real(evaluator, turn)

    monkeypatch.setattr(scoring, "turn_results", held)
    conversation = Conversation.objects.create(owner=owner)
    turn = turn_start(conversation=conversation, question="What is 40+2?", acting_user=owner)

    wait_for(lambda: Turn.objects.get(pk=turn.pk).status == "succeeded")
    answered = TurnEvent.objects.get(turn_id=turn.pk, type="turn.answered")
    assert answered.data["answer"] == "2"  # the stub answers the last number it reads
    assert entered.wait(10)  # the job has started …
    assert not OnlineScore.objects.filter(turn_id=turn.pk).exists()  # … and the answer did not wait for it
    release.set()
    score = wait_for(lambda: OnlineScore.objects.filter(turn_id=turn.pk, evaluator=ev).first())
    assert score.created_at > answered.created_at
    assert (score.value, score.passed, score.label) == (1.0, True, "answered")


def test_without_an_evaluator_a_turn_enqueues_nothing(owner, stub_chat, monkeypatch):
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(
        dispatch, "score_later", lambda turn_id, evaluator_id: sent.append((turn_id, evaluator_id))
    )
    conversation = Conversation.objects.create(owner=owner)
    turn = turn_start(conversation=conversation, question="1+1?", acting_user=owner)
    wait_for(lambda: Turn.objects.get(pk=turn.pk).status == "succeeded")
    assert sent == [] and dispatch.enabled_evaluators() == []

    ev = evaluator(sampling_rate=1.0)  # saving clears the process's cached list
    second = turn_start(conversation=conversation, question="2+2?", acting_user=owner)
    wait_for(lambda: sent)
    assert sent == [(second.pk, ev.pk)]
