"""Simulated users (issue 41): an LLM plays the user of a conversation
example from its persona and goal; it ends the conversation with the stop
marker or at ``max_turns``; its calls are seeded per (example, epoch) at the
run's temperature, so two variants meet the same user; a simulator failure
ends the conversation with its cause, never a hung run; the judge grades a
rubric over the whole conversation."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agentlab.testing.stub_llm import (
    StubLLMServer,
    error_reply,
    final_answer_reply,
    last_user_text,
    text_reply,
)
from evaluation.models import Prediction, Run
from evaluation.run.simulator import STOP_MARKER, simulator_seed
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)


def line(
    qid: str, *, max_turns: int = 5, success: dict[str, Any] | None = None, **user: Any
) -> dict[str, Any]:
    return {
        "question_id": qid,
        "task_type": "support",
        "scorer": "contains",
        "simulated_user": {
            "persona": "a customer in a hurry",
            "goal": "get order 7 refunded",
            "max_turns": max_turns,
        }
        | user,
        "success": success or {"answer": "refunded"},
    }


def write(tmp_path: Path, *lines: dict[str, Any]) -> Path:
    path = tmp_path / "sim.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def is_simulator(body: dict[str, Any]) -> bool:
    return "role-playing a user" in str(body["messages"][0].get("content"))


def is_judge(body: dict[str, Any]) -> bool:
    return str(body["messages"][0].get("content")).startswith("You grade an answer")


class Stub:
    """A stub LLM playing the simulated user (``user(body, n)`` gives its
    n-th message of a conversation, counted by its request's length), the
    agent (``agent(question)``) and the judge (``grade``); it records every
    simulator request."""

    def __init__(self, user, agent, grade: str = "correct") -> None:
        self.user, self.agent, self.grade = user, agent, grade
        self.simulator_requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, body):
        if is_simulator(body):
            with self.lock:
                self.simulator_requests.append(body)
            # system, "begin", then an (assistant, user) pair per earlier exchange
            n = (len(body["messages"]) - 2) // 2 + 1
            return self.user(body, n)
        if is_judge(body):
            return text_reply(json.dumps({"grade": self.grade, "explanation": "stub"}), usage=(20, 4))
        return final_answer_reply(self.agent(last_user_text(body)), "e", "r", usage=(10, 5))


def test_a_simulated_user_that_writes_the_stop_marker_ends_the_conversation(endpoint, tmp_path):
    messages = ["I want a refund for order 7.", "Is it done?", STOP_MARKER]
    stub = Stub(
        user=lambda body, n: text_reply(messages[n - 1], usage=(7, 3)),
        agent=lambda q: "Order 7 is refunded." if q == "Is it done?" else "Let me check order 7.",
    )
    with StubLLMServer(stub) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(write(tmp_path, line("stop"))), "--run-id", "sim-stop")
        assert server.request_count == 3 + 2  # three simulator calls, two agent turns
    prediction = Prediction.objects.get(run__run_id="sim-stop")
    turns = list(Turn.objects.filter(conversation=prediction.conversation).order_by("position"))
    assert [t.question for t in turns] == messages[:2]  # the simulator's messages are the turns' questions
    result = prediction.conversation_result
    assert (result["ended"], result["turns_to_goal"]) == ("stop_marker", 2)
    assert (prediction.correct, prediction.scorer) == (True, "contains")
    by_role = prediction.usage["by_role"]
    assert by_role["user_simulator"]["calls"] == 3
    assert (by_role["user_simulator"]["input_tokens"], by_role["user_simulator"]["output_tokens"]) == (21, 9)
    assert by_role["agent"]["calls"] == 2
    # the seed and temperature of each message are kept on its turn
    seed = simulator_seed(0, "stop", 1)
    assert turns[1].context["simulated_user"]["seed"] == seed
    assert all(body["seed"] == seed and body["temperature"] == 0.7 for body in stub.simulator_requests)
    # the simulator saw the conversation with the roles turned round
    last = stub.simulator_requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last[2]["content"] == messages[0] and last[3]["content"] == "Let me check order 7."
    metrics = Run.objects.get(run_id="sim-stop").metrics["conversations"]
    assert metrics["goal"]["correct"] == 1 and metrics["goal"]["mean_turns_to_goal"] == 2
    assert metrics["ended"] == {"stop_marker": 1}


def test_a_simulated_user_that_never_stops_runs_to_max_turns(endpoint, tmp_path):
    stub = Stub(user=lambda body, n: text_reply(f"Still waiting ({n})."), agent=lambda q: "Please hold on.")
    with StubLLMServer(stub) as server:
        endpoint(server)
        path = write(tmp_path, line("long", max_turns=3, first_message="Refund order 7, please."))
        call_command("run_eval", "--no-review", str(path), "--run-id", "sim-max")
        # the first message is the dataset's; the simulator writes the next two, then max_turns ends it
        assert len(stub.simulator_requests) == 2
    prediction = Prediction.objects.get(run__run_id="sim-max")
    turns = list(Turn.objects.filter(conversation=prediction.conversation).order_by("position"))
    assert [t.question for t in turns] == [
        "Refund order 7, please.",
        "Still waiting (2).",
        "Still waiting (3).",
    ]
    result = prediction.conversation_result
    assert (result["ended"], result["turns_to_goal"]) == ("max_turns", None)
    assert prediction.correct is False and prediction.error == ""


def test_two_variants_meet_the_same_simulated_user(endpoint, tmp_path):
    """Paired simulation: the same seed and temperature give two variants
    (two system prompts) the same first simulated message; another example
    gets another seed."""

    def user(body, n):
        return text_reply(f"Hello, I am customer {body['seed'] % 1000} at temperature {body['temperature']}.")

    stub = Stub(
        user=lambda body, n: user(body, n) if n == 1 else text_reply(STOP_MARKER), agent=lambda q: "Refunded."
    )
    path = write(tmp_path, line("a"), line("b"))
    with StubLLMServer(stub) as server:
        endpoint(server)
        for variant, prompt in (("terse", "Answer in five words."), ("kind", "Be warm and thorough.")):
            argv = ["--run-id", f"pair-{variant}", "--system-prompt", prompt, "--user-temperature", "0.9"]
            call_command("run_eval", "--no-review", str(path), *argv)
    first = {
        (p.run.run_id, p.example.external_id): Turn.objects.get(
            conversation=p.conversation, position=1
        ).question
        for p in Prediction.objects.select_related("run", "example")
    }
    assert first[("pair-terse", "a")] == first[("pair-kind", "a")]
    assert first[("pair-terse", "b")] == first[("pair-kind", "b")]
    assert first[("pair-terse", "a")] != first[("pair-terse", "b")]
    assert "temperature 0.9" in first[("pair-terse", "a")]
    openers = [b for b in stub.simulator_requests if len(b["messages"]) == 2]
    assert len(openers) == 4
    by_seed: dict[int, list[dict[str, Any]]] = {}
    for body in openers:
        by_seed.setdefault(body["seed"], []).append(body)
    assert sorted(by_seed) == sorted({simulator_seed(0, "a", 1), simulator_seed(0, "b", 1)})
    for same in by_seed.values():  # the two variants' requests are the same request
        assert same[0] == same[1]
    assert Run.objects.get(run_id="pair-kind").config["user_simulator"] == {
        "model": None,
        "temperature": 0.9,
        "seed": 0,
    }


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        (
            lambda: error_reply(400, "the simulator model is gone", type="invalid_request_error"),
            "the user simulator failed",
        ),
        (lambda: text_reply("   "), "the user simulator wrote no message"),
    ],
    ids=["provider-error", "no-message"],
)
def test_a_failing_simulator_ends_the_conversation_with_its_cause(endpoint, tmp_path, reply, cause):
    stub = Stub(
        user=lambda body, n: text_reply("Refund order 7.") if n == 1 else reply(), agent=lambda q: "Checking."
    )
    with StubLLMServer(stub) as server:
        endpoint(server)
        call_command(
            "run_eval", "--no-review", str(write(tmp_path, line("broken"))), "--run-id", "sim-broken"
        )
    prediction = Prediction.objects.get(run__run_id="sim-broken")
    assert prediction.completed_at is not None and prediction.correct is False
    assert prediction.conversation_result["ended"] == "simulator_failed"
    assert prediction.error.startswith(cause)
    assert Turn.objects.filter(conversation=prediction.conversation).count() == 1
    # --retry-errors asks the simulator again and goes on from there
    stub.user = lambda body, n: text_reply("Thanks, refunded then?") if n == 2 else text_reply(STOP_MARKER)
    stub.agent = lambda q: "Yes, order 7 is refunded."
    with StubLLMServer(stub) as server:
        endpoint(server)
        call_command(
            "run_eval",
            "--no-review",
            str(write(tmp_path, line("broken"))),
            "--run-id",
            "sim-broken",
            "--retry-errors",
        )
    prediction.refresh_from_db()
    assert prediction.correct is True and prediction.error == ""
    assert prediction.conversation_result["ended"] == "stop_marker"
    assert Turn.objects.filter(conversation=prediction.conversation).count() == 2


def test_a_rubric_is_graded_by_the_judge_over_the_whole_conversation(endpoint, tmp_path):
    messages = ["Refund order 7.", STOP_MARKER]
    stub = Stub(user=lambda body, n: text_reply(messages[n - 1]), agent=lambda q: "Order 7 is refunded.")
    rubric = {"rubric": "The assistant confirms that order 7 is refunded."}
    judged: list[dict[str, Any]] = []
    grading = stub.__call__

    def handler(body):
        if is_judge(body):
            judged.append(body)
        return grading(body)

    with StubLLMServer(handler) as server:
        endpoint(server)
        call_command(
            "run_eval",
            "--no-review",
            str(write(tmp_path, line("judged", success=rubric))),
            "--run-id",
            "sim-judge",
        )
    prediction = Prediction.objects.get(run__run_id="sim-judge")
    assert (prediction.scorer, prediction.correct, prediction.judgement["grade"]) == ("goal", True, "correct")
    assert len(judged) == 1
    asked = judged[0]["messages"][1]["content"]
    assert "User: Refund order 7.\n\nAgent: Order 7 is refunded." in asked
    assert rubric["rubric"] in asked and "get order 7 refunded" in asked
    assert Run.objects.get(run_id="sim-judge").metrics["conversations"]["goal"]["mean_turns_to_goal"] == 1


def test_conversation_examples_refuse_celery(endpoint, tmp_path, settings):
    settings.CELERY_BROKER_URL = "memory://"
    with StubLLMServer(lambda body: text_reply("x")) as server:
        endpoint(server)
        with pytest.raises(CommandError) as info:
            call_command("run_eval", "--no-review", str(write(tmp_path, line("c"))), "--celery")
        assert server.request_count == 0
    assert info.value.returncode == 2 and "without --celery" in str(info.value)
    assert not Run.objects.exists()
