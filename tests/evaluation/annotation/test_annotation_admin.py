"""The annotation pages of the admin (issue 30): the review page hides the
automatic score until the reviewer has labelled the item, labels through a
POST, refuses a label outside the rubric (nothing written), and the
judge-alignment page shows the confusion matrix."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from evaluation.annotation.queues import create_queue
from evaluation.models import HumanLabel
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue():
    dataset = make_dataset(n=3)
    make_run(dataset, "hq-judge", right={0}, judge={0: "correct", 1: "correct", 2: "incorrect"})
    return create_queue("hq-judge", name="Q")


def test_the_score_is_hidden_until_labelled_then_shown(queue):
    staff("ann")
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    review = reverse("admin:evaluation_annotationqueue_review", args=[queue.pk])
    page = client.get(review + "?item=2").content.decode()
    assert "Which city is capital number 1?" in page and "city 1" in page  # question, gold
    assert "review-score-hidden" in page and "judge said" not in page and 'review-score"' not in page
    assert '<input type="submit" id="review-save" value="Save label" disabled' in page
    response = client.post(review, {"item": "2", "label": "incorrect", "note": "town, not city"})
    # back to the item just labelled, which now shows its automatic score
    assert (response.status_code, response["Location"]) == (302, review + "?item=2")
    assert HumanLabel.objects.get().label == "incorrect"
    page = client.get(response["Location"]).content.decode()
    assert 'id="review-score"' in page and "judge said correct" in page
    assert "You labelled this item <strong>incorrect</strong>" in page
    assert f'id="review-continue" href="{review}"' in page
    assert '<input type="submit" id="review-save" value="Save label">' in page
    assert "0 of 3 labelled" not in page and "1 of 3 labelled" in page


def test_the_steps_are_indented_json_not_python_reprs(queue, owner):
    from turns.events import NewEvent, event_append_many
    from turns.models import EventType
    from turns.services import turn_create

    turn = turn_create(owner=owner, question="Which city is capital number 1?")
    call: dict[str, Any] = {"id": "c1", "name": "search_documents", "arguments": {"query": "capital 1"}}
    call.update(raw_arguments=None, error=None)
    event_append_many(
        turn_id=turn.pk,
        events=[NewEvent(EventType.TOOL_CALL, {"attempt": 1, "step": 1, "call": call})],
    )
    queue.items.get(position=2).prediction.__class__.objects.filter(
        pk=queue.items.get(position=2).prediction_id
    ).update(turn=turn)
    staff("ann")
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    review = reverse("admin:evaluation_annotationqueue_review", args=[queue.pk])
    page = client.get(review + "?item=2").content.decode()
    assert '#2 tool.call</strong><pre class="al-json">{\n  &quot;attempt&quot;: 1,' in page
    assert "&#x27;arguments&#x27;" not in page  # no Python repr's quotes
    assert "&quot;query&quot;: &quot;capital 1&quot;" in page


def test_the_end_of_a_queue_leads_to_alignment_report_and_queues(queue):
    from evaluation.annotation.labelling import give_label

    ann = staff("ann")
    for item in queue.items.all():
        give_label(item, ann, "correct")
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    page = client.get(reverse("admin:evaluation_annotationqueue_review", args=[queue.pk])).content.decode()
    assert 'id="review-done"' in page
    for url in (
        reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk]),
        reverse("admin:evaluation_run_report", args=[queue.run_id]),
        reverse("admin:evaluation_annotationqueue_changelist"),
    ):
        assert f'href="{url}"' in page


def test_an_undefined_kappa_interval_is_a_dash_and_a_scorer_is_not_a_judge():
    from evaluation.annotation.labelling import give_label

    dataset = make_dataset(n=4)
    make_run(dataset, "hq-exact", right={0, 1})  # scored by exact: no judge
    queue = create_queue("hq-exact", name="Exact")
    ann = staff("ann")
    for item, label in zip(queue.items.order_by("position"), ["correct", "correct", "incorrect", "incorrect"],
                           strict=True):  # fmt: skip
        give_label(item, ann, label)
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    page = client.get(reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk])).content.decode()
    assert '<span id="kappa-ci">—</span>: undefined for these labels' in page
    assert "95% CI  to" not in page
    assert "Scorer alignment · hq-exact" in page and "Judge alignment" not in page
    assert "scorer exact:" in page and "judge scorer" not in page


def test_a_label_outside_the_rubric_by_post_is_an_error_and_writes_nothing(queue):
    staff("ann")
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    review = reverse("admin:evaluation_annotationqueue_review", args=[queue.pk])
    response = client.post(review, {"item": "1", "label": "superb"}, follow=True)
    page = response.content.decode()
    assert "superb" in page and "is not in the rubric" in page
    assert client.post(review, {"item": "x", "label": "correct"}).status_code == 400
    assert client.get(review + "?item=99").status_code == 404
    assert HumanLabel.objects.count() == 0


def test_the_alignment_page_shows_the_confusion_matrix(queue):
    ann = staff("ann")
    from evaluation.annotation.labelling import give_label

    for item, label in zip(
        queue.items.order_by("position"), ["correct", "incorrect", "incorrect"], strict=True
    ):
        give_label(item, ann, label)
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    page = client.get(reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk])).content.decode()
    assert 'id="confusion-matrix"' in page and "<th>correct</th><td>1</td><td>1</td>" in page
    assert "q1</a>: automatic correct, human incorrect" in page
    listing = client.get(reverse("admin:evaluation_annotationqueue_changelist")).content.decode()
    assert "3 of 3 labelled" in listing


def test_the_predictions_list_filters_by_label_and_tag_and_the_report_shows_human_accuracy(queue):
    from evaluation.annotation.labelling import give_label

    ann = staff("ann")
    queue.tag_set = ["format"]
    queue.save(update_fields=["tag_set"])
    items = list(queue.items.order_by("position").select_related("prediction__example"))
    give_label(items[0], ann, "correct")
    give_label(items[1], ann, "incorrect", tags=["format"])
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    listing = reverse("admin:evaluation_prediction_changelist")
    by_label = client.get(listing + "?human_label=incorrect").content.decode()
    by_tag = client.get(listing + "?failure_tag=format").content.decode()
    correct = client.get(listing + "?human_label=correct").content.decode()
    assert "q1</a>" in by_label and "q0</a>" not in by_label and "q2</a>" not in by_label
    assert "q1</a>" in by_tag and "q0</a>" not in by_tag
    assert "q0</a>" in correct and "q1</a>" not in correct
    report = client.get(reverse("admin:evaluation_run_report", args=[queue.run.pk])).content.decode()
    assert 'id="human-review"' in report and "human-verified accuracy <strong>1/2</strong>" in report
    assert (
        "automatic accuracy on the same predictions <strong>2/2</strong>" in report and "format 1" in report
    )
