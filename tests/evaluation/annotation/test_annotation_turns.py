"""Annotation queues over chat turns (issue 45): a queue from the turns end
users rated thumbs down (``--from-feedback down [--since DATE]``), each item
a turn and never also a prediction (a check constraint), the review page
showing the turn's question, answer, steps and ratings, and the corrected
answers becoming examples of a dataset in one new version; every bad input a
clear error (exit 2) with nothing written."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from common.errors import BadInput
from evaluation.annotation.corrections import corrections_to_version
from evaluation.annotation.label_import import import_labels
from evaluation.annotation.labelling import give_label
from evaluation.annotation.queues import create_queue
from evaluation.annotation.turn_queues import create_turn_queue, turn_corrections_to_dataset
from evaluation.datasets.versions import examples_at
from evaluation.models import AnnotationQueue, Dataset, HumanLabel, QueueItem
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff
from tests.monitoring.support import add_event, finished_turn
from turns.models import Turn, TurnFeedback

pytestmark = pytest.mark.django_db

OLD = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def rate(turn: Turn, user: Any, rating: str, comment: str = "", *, at: datetime | None = None) -> None:
    """``user``'s current rating of ``turn`` (the one before kept as history)."""
    TurnFeedback.objects.filter(turn=turn, user=user, current=True).update(current=False)
    row = TurnFeedback.objects.create(turn=turn, user=user, rating=rating, comment=comment)
    if at is not None:
        TurnFeedback.objects.filter(pk=row.pk).update(created_at=at)


@pytest.fixture
def turns() -> dict[str, Turn]:
    """``lyon`` rated down long ago (with a comment and two tool steps),
    ``fine`` rated up, ``changed`` rated down then up (not down now),
    ``mixed`` rated down today by one user and up by another."""
    alice, bob = staff("alice", is_staff=False), staff("bob", is_staff=False)
    made = {
        "lyon": finished_turn(alice, question="What is the capital of France?", answer="Lyon"),
        "fine": finished_turn(alice, question="What is 6*7?", answer="42"),
        "changed": finished_turn(alice, question="Who wrote Hamlet?", answer="Shakespeare"),
        "mixed": finished_turn(bob, question="How tall is Everest?", answer="8,000 m"),
    }
    add_event(made["lyon"], "tool.call", {"name": "search", "arguments": {"query": "capital of France"}})
    add_event(made["lyon"], "tool.result", {"name": "search", "content": "Paris is the capital"})
    rate(made["lyon"], alice, "down", "wrong city", at=OLD)
    rate(made["fine"], alice, "up")
    rate(made["changed"], alice, "down")
    rate(made["changed"], alice, "up")
    rate(made["mixed"], bob, "down", "it is 8,849 m")
    rate(made["mixed"], alice, "up")
    return made


def queued_turns(queue: AnnotationQueue) -> list[int | None]:
    return [item.turn_id for item in queue.items.order_by("position")]


def test_a_queue_from_thumbs_down_holds_the_turns_rated_down_now(turns):
    queue = create_turn_queue(name="bad answers")
    assert (queue.kind, queue.run, queue.filter, queue.since) == ("turns", None, "feedback-down", None)
    assert (queue.dataset_name, queue.task_type) == ("bad answers", "qa")
    assert queued_turns(queue) == [turns["lyon"].pk, turns["mixed"].pk]
    assert all(item.prediction_id is None for item in queue.items.all())
    up = create_turn_queue(name="good answers", rating="up", dataset_name="praised")
    assert queued_turns(up) == [turns["fine"].pk, turns["changed"].pk, turns["mixed"].pk]


def test_the_command_makes_it_with_since_and_exit_2_on_bad_input(turns, capsys):
    call_command(
        "annotation_queue", "create", "--from-feedback", "down", "--since", "2026-12-05",
        "--name", "recent", "--dataset", "chat-gold",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "queue recent" in out and "1 item(s) from chat turns (dataset chat-gold)" in out
    queue = AnnotationQueue.objects.get(name="recent")
    assert queued_turns(queue) == [turns["mixed"].pk]
    assert queue.since == datetime(2026, 12, 5, tzinfo=queue.since.tzinfo)
    bad = [
        (["hq", "--from-feedback", "down"], "give a run id or --from-feedback RATING"),
        ([], "give a run id or --from-feedback RATING"),
        (["--from-feedback", "down", "--since", "last week"], "--since 'last week' is not a date"),
        (["--from-feedback", "down", "--since", "2099-01-01"], "no chat turn is rated 'down' since 2099"),
        (["--from-feedback", "down", "--dataset", "a/b"], "dataset"),
        (["--from-feedback", "down", "--name", "recent"], "already exists"),
    ]
    for argv, message in bad:
        named = argv if "--name" in argv else [*argv, "--name", "other"]
        with pytest.raises(CommandError) as excinfo:
            call_command("annotation_queue", "create", *named)
        assert excinfo.value.returncode == 2 and message in str(excinfo.value), argv
    assert list(AnnotationQueue.objects.values_list("name", flat=True)) == ["recent"]
    assert QueueItem.objects.count() == 1


def test_an_item_is_a_prediction_or_a_turn_never_both_nor_neither(turns):
    run = make_run(make_dataset(n=1), "r1", right={0})
    queue = create_turn_queue(name="q")
    prediction = run.predictions.get()
    for fields in ({"prediction": prediction, "turn": turns["lyon"]}, {}):
        with pytest.raises(IntegrityError, match="queue_item_prediction_xor_turn"), transaction.atomic():
            QueueItem.objects.create(queue=queue, position=9, **fields)
    with pytest.raises(IntegrityError, match="annotation_queue_run_unless_turns"), transaction.atomic():
        AnnotationQueue.objects.create(name="no run", kind="single")
    assert queue.items.count() == 2


def test_the_review_page_shows_the_turn_and_corrections_become_examples(turns):
    queue = create_turn_queue(name="bad", dataset_name="chat-gold")
    staff("ann")
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    review = reverse("admin:evaluation_annotationqueue_review", args=[queue.pk])
    page = client.get(review + "?item=1").content.decode()
    assert "What is the capital of France?" in page and "Lyon" in page
    assert "capital of France" in page and "Paris is the capital" in page  # its two tool steps
    assert "steps (2 tool calls and results)" in page
    assert "alice: <strong>Bad</strong> — wrong city" in page
    assert "Gold answer" not in page and "review-score-hidden" not in page
    response = client.post(review, {"item": "1", "label": "incorrect", "corrected_answer": " Paris "})
    assert response.status_code == 302
    assert HumanLabel.objects.get().corrected_answer == "Paris"

    detail = client.get(reverse("admin:evaluation_annotationqueue_change", args=[queue.pk])).content.decode()
    assert "corrections go to dataset <strong>chat-gold</strong>" in detail
    assert f"turn-{turns['lyon'].pk}: What is the capital of France?" in detail
    corrections = reverse("admin:evaluation_annotationqueue_corrections", args=[queue.pk])
    page = client.post(corrections, follow=True).content.decode()
    assert f"Dataset chat-gold: version 1 — 1 added (turn-{turns['lyon'].pk})" in page
    dataset = Dataset.objects.get(name="chat-gold")
    [example] = examples_at(dataset)
    assert (example.external_id, example.question, example.answer, example.task_type) == (
        f"turn-{turns['lyon'].pk}",
        "What is the capital of France?",
        "Paris",
        "qa",
    )
    assert example.metadata["source_turn"] == turns["lyon"].pk
    # the same corrections again: already there, no new version
    page = client.post(corrections, follow=True).content.decode()
    lyon = turns["lyon"].pk
    assert f"Dataset chat-gold: nothing added, still version 1; already there, not added: turn {lyon}" in page
    assert dataset.versions.count() == 1
    alignment = reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk])
    assert client.get(alignment).status_code == 404


def test_the_latest_correction_wins_and_a_queue_without_any_is_refused(turns):
    queue = create_turn_queue(name="bad", task_type="document_qa", overlap=2)  # two reviewers each label
    ann, cid = staff("ann"), staff("cid")
    with pytest.raises(BadInput, match="has no corrected answer"):
        turn_corrections_to_dataset(queue)
    lyon, everest = queue.items.order_by("position")
    give_label(lyon, ann, "incorrect", corrected_answer="Marseille")
    give_label(lyon, cid, "incorrect", corrected_answer="Paris")
    give_label(everest, ann, "partial")  # no correction: not added
    added = turn_corrections_to_dataset(queue, user=cid)
    assert (added.created, added.added, added.version) == (True, [f"turn-{turns['lyon'].pk}"], 1)
    [example] = examples_at(Dataset.objects.get(name="bad"))
    assert (example.answer, example.task_type) == ("Paris", "document_qa")
    # a turn queue is not a run's, nor the other way round; its labels are not imported
    with pytest.raises(BadInput, match="is over chat turns"):
        corrections_to_version(queue)
    run_queue = create_queue(make_run(make_dataset(n=1), "r1", right={0}).run_id, name="run queue")
    with pytest.raises(BadInput, match="is over a run's predictions"):
        turn_corrections_to_dataset(run_queue)
    with pytest.raises(BadInput, match="is turns: import labels into a single-run queue"):
        import_labels("bad", Path(__file__))  # refused before the file is read
