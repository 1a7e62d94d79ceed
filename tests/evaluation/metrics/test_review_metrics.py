"""Review under the evaluation policy: reviewer metrics on a small run with
known answers, approval tools in evaluation, run_eval's --review flag, and
parity of the chat and evaluation paths (issue 7)."""

from __future__ import annotations

import asyncio

import pytest
from django.core.management import call_command

from agentlab.agent.providers.scripted import ScriptedProvider, final, text, tool_call
from agentlab.agent.review import REVIEW_SYSTEM_PROMPT
from agentlab.agent.types import Completion
from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text, text_reply
from common.db import DatabaseThreads
from evaluation.datasets.services import dataset_import
from evaluation.datasets.spec import ExampleSpec
from evaluation.models import Prediction, Run
from evaluation.run.inprocess import drive_examples
from evaluation.run.lifecycle import run_finish, run_start
from evaluation.run.plan import run_plan
from tests.turns.test_review_and_approvals import counting_tools
from turns.driver import ChatPolicy, drive_turn
from turns.selectors import events_after
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)


class OracleProvider:
    """Answers by question: ``first[q]`` on the first attempt, ``second[q]``
    after a review retry; the reviewer gets ``verdicts[q]`` (a retry carries
    an instruction). Every call costs 10 in / 5 out."""

    name = "oracle"
    model = "oracle"
    native_tools = True

    def __init__(self, first: dict[str, str], second: dict[str, str], verdicts: dict[str, str]) -> None:
        self.first, self.second, self.verdicts = first, second, verdicts
        self.calls = 0

    async def complete(self, messages, tools=None, **_kw) -> Completion:
        self.calls += 1
        user = messages[1]["content"]
        question = next(q for q in self.first if user.startswith(q) or f"Question:\n{q}" in user)
        if messages[0]["content"] == REVIEW_SYSTEM_PROMPT:
            verdict = self.verdicts[question]
            body = {
                "retry": '{"verdict": "retry", "note": "suspicious", "retry_instruction": "check again"}',
                "accept": '{"verdict": "accept", "note": "fine"}',
                "none": "The answer looks plausible to me.",
            }[verdict]
            return text(body, usage=(10, 5), model="oracle")
        answer = self.second[question] if "Reviewer's instruction" in user else self.first[question]
        return final(answer, usage=(10, 5), model="oracle")


def _dataset(name: str, rows: list[tuple[str, str, str, str]]):
    return dataset_import(
        name=name,
        examples=[ExampleSpec(external_id=eid, question=q, answer=a, task_type=tt) for eid, q, a, tt in rows],
    )


def _run(run_id: str, dataset, provider, *, review: bool = True, max_steps: int = 4, tools=None) -> Run:
    run, _ = run_start(run_id=run_id, dataset=dataset, config={})
    planned, _ = run_plan(run=run, limit=None, max_steps=max_steps, model="oracle")

    async def go() -> None:
        with DatabaseThreads(max_workers=4) as db:
            # with a custom registry or not: the same policy, the same recording
            await drive_examples(planned, provider=provider, db=db, concurrency=2, review=review, tools=tools)

    asyncio.run(go())
    return run_finish(run=run)


def test_reviewer_metrics_on_a_small_run_with_known_answers():
    ds = _dataset(
        "reviewed",
        [
            ("fix", "What is 1+1?", "2", "math"),  # wrong → retry → right
            ("break", "What is 2+2?", "4", "math"),  # right → retry → wrong
            ("keep", "Capital of France?", "Paris", "qa"),  # right, accepted
            ("miss", "Colour of the sky?", "blue", "qa"),  # wrong, accepted
        ],
    )
    provider = OracleProvider(
        first={
            "What is 1+1?": "3",
            "What is 2+2?": "4",
            "Capital of France?": "Paris",
            "Colour of the sky?": "red",
        },
        second={"What is 1+1?": "2", "What is 2+2?": "5"},
        verdicts={
            "What is 1+1?": "retry",
            "What is 2+2?": "retry",
            "Capital of France?": "accept",
            "Colour of the sky?": "accept",
        },
    )
    run = _run("reviewed-run", ds, provider)
    # 4 first attempts + 4 reviews + 2 retried attempts + 2 reviews of them
    assert provider.calls == 12
    by_id = {p.example.external_id: p for p in Prediction.objects.filter(run=run).select_related("example")}
    assert {k: (p.first_correct, p.correct, p.review_retried, p.prediction) for k, p in by_id.items()} == {
        "fix": (False, True, True, "2"),
        "break": (True, False, True, "5"),
        "keep": (True, True, False, "Paris"),
        "miss": (False, False, False, "red"),
    }
    # the tokens of every attempt and review count
    assert (by_id["fix"].input_tokens, by_id["keep"].input_tokens) == (40, 20)
    review = run.metrics["review"]
    assert review["per_task_type"] == {
        "math": {
            "first_attempt_accuracy": 0.5,
            "final_accuracy": 0.5,
            "review_retries": 2,
            "review_retry_rate": 1.0,
            "retry_fixed": 1,
            "retry_broke": 1,
            # the retried attempts were reviewed again (and asked for a
            # retry again, past the one allowed): their last verdict
            "verdicts": {"retry": 2},
            "review_failed": 0,
        },
        "qa": {
            "first_attempt_accuracy": 0.5,
            "final_accuracy": 0.5,
            "review_retries": 0,
            "review_retry_rate": 0.0,
            "retry_fixed": 0,
            "retry_broke": 0,
            "verdicts": {"accept": 2},
            "review_failed": 0,
        },
    }
    del review["per_task_type"]
    assert review == {
        "first_attempt_accuracy": 0.5,
        "final_accuracy": 0.5,
        "review_retries": 2,
        "review_retry_rate": 0.5,
        "retry_fixed": 1,
        "retry_broke": 1,
        "verdicts": {"accept": 2, "retry": 2},
        "review_failed": 0,
    }
    assert {k: p.review_verdict for k, p in by_id.items()} == {
        "fix": "retry",
        "break": "retry",
        "keep": "accept",
        "miss": "accept",
    }
    assert (run.metrics["accuracy"], run.metrics["tokens"]["input"]) == (0.5, 120)


def test_a_reviewer_without_a_verdict_is_counted_as_a_failed_review():
    ds = _dataset("unjudged", [("a", "What is 1+1?", "2", "math"), ("b", "What is 2+2?", "4", "math")])
    provider = OracleProvider(
        first={"What is 1+1?": "2", "What is 2+2?": "5"},
        second={},
        verdicts={"What is 1+1?": "none", "What is 2+2?": "accept"},
    )
    run = _run("unjudged-run", ds, provider)
    assert provider.calls == 4  # two answers, two reviews, no retry
    verdicts = dict(Prediction.objects.filter(run=run).values_list("example__external_id", "review_verdict"))
    assert verdicts == {"a": "failed", "b": "accept"}
    review = run.metrics["review"]
    assert (review["verdicts"], review["review_failed"], review["review_retries"]) == (
        {"accept": 1, "failed": 1},
        1,
        0,
    )
    # the answers stand as given: a failed review changes nothing
    assert (run.metrics["correct"], run.metrics["total"]) == (1, 2)


def test_without_review_one_call_per_example_and_no_retry():
    ds = _dataset("unreviewed", [("a", "What is 1+1?", "2", "math")])
    provider = OracleProvider(first={"What is 1+1?": "3"}, second={}, verdicts={})
    run = _run("unreviewed-run", ds, provider, review=False)
    assert provider.calls == 1
    p = Prediction.objects.get(run=run)
    assert (p.correct, p.first_correct, p.review_retried) == (False, False, False)
    assert run.metrics["review"]["review_retries"] == 0
    assert (p.review_verdict, run.metrics["review"]["verdicts"], run.metrics["review"]["review_failed"]) == (
        "",
        {},
        0,
    )


def test_the_evaluation_policy_cancels_an_approval_tool_and_the_prediction_says_so():
    ds = _dataset("needs-approval", [("d", "Deploy x", "done", "qa")])
    counter: dict[str, int] = {}
    provider = ScriptedProvider([tool_call("deploy", {"label": "x"})])
    run = _run("approval-run", ds, provider, tools=counting_tools(counter))
    p = Prediction.objects.get(run=run)
    assert (p.stop_reason, p.correct, p.prediction, p.completed_at is not None) == (
        "approval_required",
        False,
        "",
        True,
    )
    assert (p.turn.status, p.turn.outcome) == ("cancelled", "cancelled")
    assert counter == {} and not p.turn.approvals.exists()
    assert run.metrics["stop_reasons"] == {"approval_required": 1}


def test_review_follows_the_policy_then_the_setting_then_the_provider_s_default(settings):
    from agentlab.agent.providers.local import LocalGGUFProvider as LocalProvider
    from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
    from turns.driver.policies import ChatPolicy, EvaluationPolicy

    assert (LocalProvider.review_by_default, OpenAICompatibleProvider.review_by_default) == (False, True)
    settings.AGENTLAB_REVIEW = None  # unset
    assert not ChatPolicy().review_enabled(LocalProvider) and ChatPolicy().review_enabled(
        OpenAICompatibleProvider
    )
    assert EvaluationPolicy(review=True).review_enabled(LocalProvider)
    settings.AGENTLAB_REVIEW = True
    assert ChatPolicy().review_enabled(LocalProvider)
    settings.AGENTLAB_REVIEW = False
    assert not ChatPolicy().review_enabled(OpenAICompatibleProvider)


def test_run_eval_reviews_by_default_and_not_with_no_review(settings):
    settings.AGENTLAB_REVIEW = None  # unset: an endpoint model's default is on
    questions = {"What is 6*7?": "42"}
    seen: list[str] = []

    def handler(body):
        system = body["messages"][0]["content"]
        if system == REVIEW_SYSTEM_PROMPT:
            seen.append("review")
            return text_reply('{"verdict": "accept", "note": "ok"}', usage=(7, 3))
        seen.append("act")
        return final_answer_reply(questions[last_user_text(body)], "e", "r", usage=(10, 5))

    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one.jsonl"
        path.write_text(
            json.dumps({"question_id": "q1", "question": "What is 6*7?", "answer": "42", "task_type": "math"})
            + "\n"
        )
        with StubLLMServer(handler) as stub:
            settings.AGENTLAB_LLM_BASE_URL = stub.base_url
            settings.AGENTLAB_LLM_API_KEY = "k"
            settings.AGENTLAB_MODEL = "stub-model"
            call_command("run_eval", str(path), "--run-id", "with-review")
            call_command("run_eval", str(path), "--run-id", "without-review", "--no-review")
    assert seen == ["act", "review", "act"]
    with_review = Run.objects.get(run_id="with-review")
    assert with_review.config["review"] is True and with_review.metrics["tokens"]["input"] == 17
    assert Run.objects.get(run_id="without-review").config["review"] is False
    turn = Prediction.objects.get(run=with_review).turn
    assert [e.type for e in events_after(turn_id=turn.pk)][-4:] == [
        "phase",
        "review",
        "phase",
        "turn.answered",
    ]


def test_chat_and_evaluation_paths_write_the_same_event_types(owner, settings):
    """Parity: one scripted model, one question, reviewed, through the chat
    policy and through the run_eval runner. The documented differences
    (docs/architecture.md#the-driver) are approvals (chat waits, evaluation cancels), a late
    review (chat only) — neither happens here — and streaming: the model
    streams, but only the chat policy streams its calls, so chat's log also
    has ``llm.delta`` events and is otherwise equal to evaluation's."""
    settings.AGENTLAB_REVIEW = True
    settings.REVIEW_WAIT_S = 30

    def script():
        return ScriptedProvider(
            [
                tool_call("calculator", {"expression": "6*7"}, usage=(20, 8)),
                final("41", usage=(30, 6)),
                text('{"verdict": "retry", "note": "n", "retry_instruction": "recompute"}', usage=(40, 9)),
                final("42", usage=(30, 6)),
                text('{"verdict": "accept", "note": "ok"}', usage=(40, 9)),
            ],
            stream_chars=3,  # a provider that can stream
        )

    chat_turn = turn_create(owner=owner, question="What is 6*7?")

    async def chat() -> None:
        with DatabaseThreads(max_workers=2) as db:
            await drive_turn(chat_turn.pk, policy=ChatPolicy(), provider=script(), db=db)

    asyncio.run(chat())
    ds = _dataset("parity", [("p", "What is 6*7?", "42", "math")])
    run = _run("parity-run", ds, script(), max_steps=6)
    eval_turn = Prediction.objects.get(run=run).turn

    chat_all = [e.type for e in events_after(turn_id=chat_turn.pk)]
    eval_types = [e.type for e in events_after(turn_id=eval_turn.pk)]
    assert "llm.delta" in chat_all and "llm.delta" not in eval_types  # evaluation does not stream
    chat_types = [t for t in chat_all if t != "llm.delta"]
    assert chat_types == eval_types
    assert chat_types == [
        "turn.queued",
        "turn.started",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.started",
        "tool.result",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "review",
        "attempt.retry",
        "phase",
        "llm.usage",
        "tool.call",
        "tool.result",
        "phase",
        "review",
        "phase",
        "turn.answered",
    ]
    chat_turn.refresh_from_db()
    assert (chat_turn.answer, eval_turn.answer, chat_turn.attempts, eval_turn.attempts) == ("42", "42", 2, 2)
    assert chat_turn.usage == eval_turn.usage
