"""Conversation examples (issue 41): a scripted conversation driven turn after
turn as one conversation of the run's system user, scored per turn and as a
whole; resumed at its first unfinished turn after a kill; epochs repeat whole
conversations."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, last_user_text
from evaluation.models import Prediction, Run
from tests.evaluation.run.process_support import subprocess_env
from tests.evaluation.run.test_run_eval import ROOT
from turns.models import Conversation, Turn, TurnStatus

pytestmark = pytest.mark.django_db(transaction=True)

#: two scripted conversations: the first gets its second turn wrong
LINES: list[dict[str, Any]] = [
    {
        "question_id": "sum",
        "task_type": "math",
        "turns": [
            {"user": "What is 2 + 3?", "answer": "5"},
            {"user": "Now add 4 to that.", "answer": 9},
            {"user": "Thanks, that is all."},
        ],
    },
    {
        "question_id": "capitals",
        "task_type": "qa",
        "turns": [
            {"user": "What is the capital of France?", "answer": "Paris"},
            {"user": "And of Italy?", "answer": ["Rome", "Roma"]},
            {"user": "Which of the two has more people?", "answer": "Paris", "scorer": "contains"},
        ],
    },
]

#: the stub's answer to each user message
ANSWERS = {
    "What is 2 + 3?": "5",
    "Now add 4 to that.": "10",  # wrong: 9
    "Thanks, that is all.": "You are welcome.",
    "What is the capital of France?": "Paris",
    "And of Italy?": "Rome",
    "Which of the two has more people?": "Paris has more people than Rome.",
}


def write_lines(tmp_path: Path, lines: list[dict], name: str = "convs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def answering(latency: float = 0.0, seen: list[dict[str, Any]] | None = None):
    def handler(body):
        if seen is not None:
            seen.append(body)
        return final_answer_reply(ANSWERS[last_user_text(body)], "e", "r", usage=(10, 5), delay=latency)

    return handler


def test_a_scripted_conversation_is_driven_as_one_conversation_and_scored_per_turn_and_whole(
    endpoint, tmp_path, capsys
):
    path = write_lines(tmp_path, LINES)
    seen: list[dict[str, Any]] = []
    with StubLLMServer(answering(seen=seen)) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "conv", "--concurrency", "2")
        assert server.request_count == 6  # one LLM call per turn, three turns per conversation
    # each turn's request holds the conversation's earlier turns, oldest first
    third = next(b for b in seen if last_user_text(b) == "Thanks, that is all.")
    said = [(m["role"], m["content"]) for m in third["messages"] if m["role"] in ("user", "assistant")]
    assert said[:4] == [
        ("user", "What is 2 + 3?"),
        ("assistant", "5"),
        ("user", "Now add 4 to that."),
        ("assistant", "10"),
    ]
    first = next(b for b in seen if last_user_text(b) == "What is 2 + 3?")
    assert [m["role"] for m in first["messages"]].count("assistant") == 0

    run = Run.objects.get(run_id="conv")
    by_id = {p.example.external_id: p for p in run.predictions.select_related("example", "conversation")}
    assert set(by_id) == {"sum", "capitals"}
    for prediction in by_id.values():
        conversation = prediction.conversation
        assert conversation is not None and conversation.owner_id == run.system_user_id
        turns = list(Turn.objects.filter(conversation=conversation).order_by("position"))
        assert [t.position for t in turns] == [1, 2, 3]
        assert [t.status for t in turns] == [TurnStatus.SUCCEEDED] * 3
        assert prediction.turn_id == turns[-1].pk  # the row points at the latest turn
        assert all(t.owner_id == run.system_user_id and t.kind == "evaluation" for t in turns)

    wrong = by_id["sum"]
    assert (wrong.correct, wrong.score) == (False, 0.0)
    result = wrong.conversation_result
    assert [t["user"] for t in result["turns"]] == [line["user"] for line in LINES[0]["turns"]]
    assert [t.get("correct") for t in result["turns"]] == [True, False, None]  # the third has no gold
    assert [t["answer"] for t in result["turns"]] == ["5", "10", "You are welcome."]
    assert result["turns"][1]["gold"] == "9" and result["turns"][1]["scorer"] == "numeric"
    assert (result["scored_turns"], result["correct_turns"], result["turn_accuracy"]) == (2, 1, 0.5)
    assert result["last_turn_correct"] is False
    assert (result["verdict_rule"], result["ended"]) == ("every_scored_turn", "script_done")
    assert wrong.score_explanation == "1 of 2 scored turns right"
    assert wrong.prediction.startswith("User: What is 2 + 3?\n\nAgent: 5\n\nUser: Now add 4 to that.")
    assert wrong.usage["calls"] == 3 and (wrong.input_tokens, wrong.output_tokens) == (30, 15)
    assert wrong.error == "" and wrong.steps == 3

    right = by_id["capitals"]
    assert (right.correct, right.score) == (True, 1.0)
    result = right.conversation_result
    assert [t["correct"] for t in result["turns"]] == [True, True, True]
    assert [t["scorer"] for t in result["turns"]] == ["exact", "exact", "contains"]
    assert (result["turn_accuracy"], result["last_turn_correct"]) == (1.0, True)

    metrics = run.metrics
    assert (metrics["total"], metrics["correct"]) == (2, 1)
    conversations = metrics["conversations"]
    assert conversations["examples"] == 2
    assert conversations["scored_turns"] == 5 and conversations["correct_turns"] == 4
    assert conversations["turn_accuracy"] == pytest.approx(0.8)
    assert conversations["last_turn_accuracy"] == pytest.approx(0.5)
    assert "Conversations" in capsys.readouterr().out


def test_epochs_repeat_whole_conversations(endpoint, tmp_path):
    path = write_lines(tmp_path, LINES[:1])
    with StubLLMServer(answering()) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "conv-ep", "--epochs", "2")
        assert server.request_count == 6
    run = Run.objects.get(run_id="conv-ep")
    preds = list(run.predictions.order_by("epoch"))
    assert [p.epoch for p in preds] == [1, 2]
    assert len({p.conversation_id for p in preds}) == 2
    for p in preds:
        assert Turn.objects.filter(conversation=p.conversation).count() == 3
        assert p.correct is False
    # a resume has nothing left to do
    with StubLLMServer(answering()) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "conv-ep")
        assert server.request_count == 0


def test_a_failed_turn_ends_the_conversation_and_the_example_is_wrong(endpoint, tmp_path):
    from agentlab.testing.stub_llm import error_reply

    path = write_lines(tmp_path, LINES[1:])

    def handler(body):
        if last_user_text(body) == "And of Italy?":
            return error_reply(400, "the model refuses", type="invalid_request_error")
        return answering()(body)

    with StubLLMServer(handler) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "conv-fail")
        assert server.request_count == 2  # the third message is never sent
    prediction = Prediction.objects.get(run__run_id="conv-fail")
    assert prediction.correct is False
    result = prediction.conversation_result
    assert result["ended"] == "turn_failed"
    assert [t["outcome"] for t in result["turns"]] == ["answered", "failed", "not reached"]
    assert [t["correct"] for t in result["turns"]] == [True, False, False]
    assert prediction.error.startswith("turn 2 ended failed")
    assert Turn.objects.filter(conversation=prediction.conversation).count() == 2


def test_resume_after_a_kill_continues_each_conversation_at_its_first_unfinished_turn(tmp_path):
    lines: list[dict[str, Any]] = [
        {
            "question_id": f"c{i}",
            "task_type": "math",
            "turns": [{"user": f"Start {i}: what is {i} + 1?", "answer": str(i + 1)}]
            + [{"user": f"Step {k} of {i}: add one more.", "answer": str(i + 1 + k)} for k in (1, 2)],
        }
        for i in range(4)
    ]
    path = write_lines(tmp_path, lines)
    replies = {}
    for line in lines:
        for turn in line["turns"]:
            replies[turn["user"]] = turn["answer"]
    asked: list[str] = []

    def handler(body):
        text = last_user_text(body)
        asked.append(text)
        return final_answer_reply(replies[text], "e", "r", usage=(10, 5), delay=0.2)

    with StubLLMServer(handler) as server:
        cmd = [sys.executable, "manage.py", "run_eval", "--no-review", str(path), "--run-id", "conv-kill"]
        cmd += ["--concurrency", "2"]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=subprocess_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            # killed once some conversation is past its first turn and none is done
            while not Turn.objects.filter(position=2, status=TurnStatus.SUCCEEDED).exists():
                assert time.monotonic() < deadline, "the first run made no progress"
                assert proc.poll() is None, "the first run ended before it was killed"
                time.sleep(0.02)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        done = {t.question for t in Turn.objects.filter(status=TurnStatus.SUCCEEDED)}
        assert Prediction.objects.filter(run__run_id="conv-kill", completed_at__isnull=True).exists()
        resumed = subprocess.run(
            cmd, cwd=ROOT, env=subprocess_env(server), capture_output=True, text=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr

    run = Run.objects.get(run_id="conv-kill")
    assert run.predictions.count() == 4 and run.predictions.filter(completed_at__isnull=True).count() == 0
    assert (run.metrics["total"], run.metrics["correct"]) == (4, 4)
    for prediction in run.predictions.all():
        turns = list(Turn.objects.filter(conversation=prediction.conversation).order_by("position"))
        assert [t.position for t in turns] == [1, 2, 3]  # no turn made twice
        assert all(t.status == TurnStatus.SUCCEEDED for t in turns)
    # a turn that had answered before the kill was not asked again
    for question in done:
        assert asked.count(question) == 1
    assert Conversation.objects.filter(owner=run.system_user).count() == 4


def test_the_prediction_page_and_a_review_queue_show_the_whole_conversation(
    endpoint, tmp_path, client, staff
):
    from evaluation.admin.annotation import review_url
    from evaluation.annotation.queues import create_queue

    path = write_lines(tmp_path, LINES[:1])
    with StubLLMServer(answering()) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(path), "--run-id", "conv-pages")
    prediction = Prediction.objects.get(run__run_id="conv-pages")
    client.force_login(staff)
    page = client.get(f"/admin/evaluation/prediction/{prediction.pk}/change/").content.decode()
    assert "<th>verdict</th>" in page
    for cell in ("What is 2 + 3?", "Now add 4 to that.", "<td>10</td>", "<td>wrong</td>", "<td>no gold</td>"):
        assert cell in page
    assert "ended: script_done" in page
    queue = create_queue("conv-pages", name="conversations")
    review = client.get(review_url(queue.pk)).content.decode()
    for line in (
        "User: What is 2 + 3?",
        "Agent: 5",
        "User: Now add 4 to that.",
        "Agent: 10",
        "User: Thanks, that is all.",
    ):
        assert line in review


def test_cancel_run_ends_a_conversation_mid_way_and_the_run_stays_cancelled(endpoint, tmp_path):
    from evaluation.run.cancel import run_cancel

    path = write_lines(tmp_path, LINES[:1])
    cancelled: list[int] = []

    def handler(body):
        if last_user_text(body) == "Now add 4 to that." and not cancelled:
            cancelled.append(run_cancel(run_id="conv-cancel").cancelled)
            connection.close()  # this is the stub server's thread: its own connection
        return answering()(body)

    with StubLLMServer(handler) as server:
        endpoint(server)
        with pytest.raises(CommandError, match="run conv-cancel was cancelled"):
            call_command("run_eval", "--no-review", str(path), "--run-id", "conv-cancel")
        assert server.request_count <= 2  # the third message is never sent
    run = Run.objects.get(run_id="conv-cancel")
    assert run.status == "cancelled"
    prediction = run.predictions.get()
    assert prediction.completed_at is not None and prediction.stop_reason == "cancelled"
    assert prediction.conversation_result["ended"] == "cancelled"
    assert prediction.correct is False
    assert Turn.objects.filter(conversation=prediction.conversation).count() == 2
