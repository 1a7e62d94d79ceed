"""Two deliveries of the same online-scoring task at the same moment (issue
47, item 4): the (turn, evaluator) pair is claimed before the judge is
called, so the duplicate pays no judge call; the claim is released when
scoring ends, and by the database when the holder's connection ends."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from agentlab.testing.stub_llm import StubLLMServer, StubReply, text_reply
from monitoring.models import OnlineScore
from monitoring.score_claim import score_claim
from monitoring.scoring import online_score_turn
from tests.monitoring.support import evaluator, finished_turn

pytestmark = pytest.mark.django_db(transaction=True)


def slow_grade(body) -> StubReply:
    """The judge: "correct", after 1 s (both deliveries are inside their scoring then)."""
    return text_reply(json.dumps({"grade": "correct", "explanation": "ok"}), usage=(120, 15), delay=1.0)


def test_two_deliveries_at_once_make_one_judge_call(owner, settings):
    ev = evaluator(judge=True)
    turn = finished_turn(owner)
    start = threading.Barrier(2)

    def deliver() -> str:
        start.wait(5)
        try:
            return online_score_turn(turn_id=turn.pk, evaluator_id=ev.pk).status
        finally:
            connection.close()

    with StubLLMServer(slow_grade) as stub:
        settings.AGENTLAB_LLM_BASE_URL = stub.base_url
        settings.AGENTLAB_MODEL = "stub-judge"
        with ThreadPoolExecutor(2) as pool:
            statuses = sorted(pool.map(lambda _: deliver(), range(2)))
        calls = stub.request_count
    assert statuses == ["claimed", "scored"]
    assert calls == 1  # the duplicate paid nothing
    (score,) = OnlineScore.objects.filter(turn=turn, evaluator=ev)
    assert (score.value, score.passed) == (1.0, True)


def test_a_claim_is_free_again_after_scoring_and_after_its_connection_ends(owner):
    turn, ev = finished_turn(owner), evaluator()

    def in_another_thread(*, crash: bool = False) -> bool:
        """Try the claim from another connection; ``crash``: take it and drop
        the connection without releasing it (a worker killed mid-judge)."""
        seen: list[bool] = []

        def run() -> None:
            try:
                claim = score_claim(turn_id=turn.pk, evaluator_id=ev.pk)
                seen.append(claim.__enter__())
                if not crash:
                    claim.__exit__(None, None, None)
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(10)
        return seen[0]

    with score_claim(turn_id=turn.pk, evaluator_id=ev.pk) as first:
        assert first is True
        assert in_another_thread() is False  # held here
    assert in_another_thread() is True  # released when scoring ended
    if connection.vendor == "postgresql":
        assert in_another_thread(crash=True) is True
        with score_claim(turn_id=turn.pk, evaluator_id=ev.pk) as after_crash:
            assert after_crash is True  # the server released the dead session's lock
