"""Annotation queues (issue 30): creation per filter and the seeded sample,
the claim, label history, human-verified accuracy, the judge report, the
pairwise queue's result, corrected answers as a dataset version, and every
bad input (a clear error, nothing written)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from common.errors import BadInput, NotFound, StateConflict
from evaluation.annotation.alignment import human_accuracy, judge_report, pairwise_queue_result
from evaluation.annotation.corrections import corrections_to_version
from evaluation.annotation.labelling import give_label, label_history, progress
from evaluation.annotation.labelling import next_item as claim_next
from evaluation.annotation.queues import create_pairwise_queue, create_queue
from evaluation.datasets.versions import examples_at
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import AnnotationQueue, HumanLabel, QueueItem
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs():
    """``exact``: right on q0–q2, q9 unscored; ``judge``: its rescore, grading q0–q5 correct, q6 partial."""
    dataset = make_dataset()
    exact = make_run(dataset, "hq-exact", right={0, 1, 2}, unscored={9})
    grades = {i: "correct" for i in range(6)} | {6: "partial", 7: "incorrect", 8: "incorrect", 9: "incorrect"}
    judge = make_run(dataset, "hq-judge", right={0, 1, 2}, judge=grades, rescored_from=exact)
    return exact, judge


def must_next(queue: AnnotationQueue, user: Any) -> QueueItem:
    item = claim_next(queue, user)
    assert item is not None, f"no item for {user}"
    return item


def qids(queue: AnnotationQueue) -> list[str]:
    return [item.prediction.example.external_id for item in queue.items.select_related("prediction__example")]


def test_each_filter_picks_its_predictions(runs):
    assert qids(create_queue("hq-exact", name="all")) == [f"q{i}" for i in range(10)]
    assert qids(create_queue("hq-exact", name="wrong", filter_name="wrong")) == [f"q{i}" for i in range(3, 9)]
    assert qids(create_queue("hq-exact", name="unscored", filter_name="unscored")) == ["q9"]
    assert qids(create_queue("hq-judge", name="judged", filter_name="judged")) == [f"q{i}" for i in range(10)]
    # exact says q3–q5 wrong and q9 unscored, the judge correct / incorrect: they disagree there
    assert qids(create_queue("hq-judge", name="disagree", filter_name="disagree")) == ["q3", "q4", "q5", "q9"]
    assert qids(create_queue("hq-exact", name="disagree2", filter_name="disagree")) == [
        "q3",
        "q4",
        "q5",
        "q9",
    ]


def test_the_seeded_sample_is_reproducible_and_is_random_sample_of_the_filtered(runs):
    a = create_queue("hq-exact", name="a", sample=4, seed=7)
    b = create_queue("hq-exact", name="b", sample=4, seed=7)
    c = create_queue("hq-exact", name="c", sample=4, seed=8)
    expected = sorted(random.Random(7).sample(range(10), 4))
    assert qids(a) == qids(b) == [f"q{i}" for i in expected]
    assert qids(c) != qids(a) and len(qids(c)) == 4
    assert (a.sample, a.seed, a.filter) == (4, 7, "all")


def test_two_reviewers_never_get_the_same_item_without_overlap(runs):
    queue = create_queue("hq-exact", name="q", sample=3, seed=1)
    ann, bob = staff("ann"), staff("bob")
    first_ann, first_bob = must_next(queue, ann), must_next(queue, bob)
    assert first_ann is not None and first_bob is not None and first_ann.pk != first_bob.pk
    assert must_next(queue, ann).pk == first_ann.pk  # her claim holds it for her
    with pytest.raises(StateConflict, match="held by another reviewer"):
        give_label(first_ann, bob, "correct")
    assert HumanLabel.objects.count() == 0
    give_label(first_ann, ann, "correct")
    give_label(first_bob, bob, "incorrect")
    third = must_next(queue, ann)
    assert third is not None and third.pk not in (first_ann.pk, first_bob.pk)
    assert claim_next(queue, bob) is None  # the third is ann's; the other two are done
    give_label(third, ann, "partial")
    assert claim_next(queue, bob) is None and progress(queue) == {"items": 3, "labelled": 3, "done": 3}


def test_an_expired_claim_frees_the_item(runs):
    queue = create_queue("hq-exact", name="q", sample=1, seed=1)
    ann, bob = staff("ann"), staff("bob")
    item = must_next(queue, ann)
    assert claim_next(queue, bob) is None
    QueueItem.objects.filter(pk=item.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert must_next(queue, bob).pk == item.pk


def test_with_overlap_each_item_goes_to_two_reviewers_once_each(runs):
    queue = create_queue("hq-exact", name="q", sample=2, seed=3, overlap=2)
    ann, bob, cy = staff("ann"), staff("bob"), staff("cy")
    seen: dict[str, list[int]] = {"ann": [], "bob": []}
    for user in (ann, bob, ann, bob):
        item = must_next(queue, user)
        seen[user.username].append(item.pk)
        give_label(item, user, "correct")
    assert sorted(seen["ann"]) == sorted(seen["bob"]) and len(set(seen["ann"])) == 2
    assert claim_next(queue, cy) is None and progress(queue)["done"] == 2


def test_a_changed_label_keeps_its_history(runs):
    queue = create_queue("hq-exact", name="q", sample=1, seed=1)
    ann = staff("ann")
    item = must_next(queue, ann)
    give_label(item, ann, "correct", note="first look")
    give_label(item, ann, "incorrect", note="the passage says otherwise")
    history = label_history(item)
    assert [(h["reviewer"], h["label"], h["current"]) for h in history] == [
        ("ann", "correct", False),
        ("ann", "incorrect", True),
    ]
    assert history[0]["at"] <= history[1]["at"] and history[1]["note"] == "the passage says otherwise"


def label_all(queue: AnnotationQueue, user, labels: dict[str, str], tags: dict[str, list[str]] | None = None):
    items = {i.prediction.example.external_id: i for i in queue.items.select_related("prediction__example")}
    for qid, label in labels.items():
        give_label(items[qid], user, label, tags=(tags or {}).get(qid, ()))


def test_human_verified_accuracy_beside_the_automatic_one_on_the_same_items(runs):
    exact, _ = runs
    queue = create_queue("hq-exact", name="q", tags=["wrong tool", "gave up"])
    ann = staff("ann")
    # q0–q5 right by a human, q6 partial, q7 wrong, q9 (unscored) wrong; q8 not labelled
    labels = {f"q{i}": "correct" for i in range(6)} | {"q6": "partial", "q7": "incorrect", "q9": "incorrect"}
    label_all(queue, ann, labels, tags={"q7": ["wrong tool"], "q9": ["gave up", "wrong tool"]})
    got = human_accuracy(exact)
    assert (got["labelled"], got["human_correct"], got["auto_scored"], got["auto_correct"]) == (9, 6, 8, 3)
    assert got["human_accuracy"] == pytest.approx(6 / 9)
    assert got["human_ci"] == pytest.approx(wilson_interval(6, 9))
    assert got["human_ci"] == pytest.approx((0.3542, 0.8794), abs=1e-4)  # binomtest(6, 9) Wilson
    assert got["auto_accuracy"] == pytest.approx(3 / 8) and got["auto_ci"] == pytest.approx(
        wilson_interval(3, 8)
    )
    assert got["tags"] == {"wrong tool": 2, "gave up": 1}


def test_the_judge_report_confusion_agreement_and_disagreements(runs):
    _, judge = runs
    queue = create_queue("hq-judge", name="q")
    ann = staff("ann")
    labels = {f"q{i}": "correct" for i in range(4)} | {"q4": "incorrect", "q5": "partial", "q6": "partial"}
    labels |= {"q7": "incorrect", "q8": "correct", "q9": "incorrect"}
    label_all(queue, ann, labels)
    report = judge_report(judge)
    assert report["items"] == 10 and report["agreement"] == pytest.approx(0.7)
    assert report["confusion"]["classes"] == ["correct", "partial", "incorrect"]
    assert report["confusion"]["table"] == [[4, 1, 1], [0, 1, 0], [1, 0, 2]]
    assert [(d["question_id"], d["automatic"], d["human"]) for d in report["disagreements"]] == [
        ("q4", "correct", "incorrect"),
        ("q5", "correct", "partial"),
        ("q8", "incorrect", "correct"),
    ]
    assert report["kappa_ci_low"] < report["kappa"] < report["kappa_ci_high"]
    assert [(g["judge"], g["items"]) for g in report["groups"]] == [("judge-model", 10)]
    assert report["reviewers"] is None


def test_two_reviewers_agreement_is_cohens_kappa_three_is_fleiss(runs):
    queue = create_queue("hq-exact", name="q", sample=4, seed=2, overlap=3)
    people = [staff("ann"), staff("bob"), staff("cy")]
    run = queue.run
    assert run is not None and run.run_id == "hq-exact"
    for n, user in enumerate(people):
        for item in queue.items.all():
            give_label(item, user, "incorrect" if (item.position + n) % 3 == 0 else "correct")
        if n == 1:
            two = judge_report(run)["reviewers"]
    assert two["method"] == "Cohen's kappa" and two["reviewers"] == ["ann", "bob"] and two["items"] == 4
    three = judge_report(run)["reviewers"]
    assert three["method"] == "Fleiss' kappa" and three["items"] == 4 and three["kappa"] is not None


def test_the_pairwise_queue_maps_left_and_right_back_through_the_hidden_order(runs):
    queue = create_pairwise_queue("hq-exact", "hq-judge", name="pw", seed=5)
    swapped = list(queue.items.values_list("swapped", flat=True))
    rng = random.Random(5)
    assert swapped == [rng.random() < 0.5 for _ in range(10)]
    ann = staff("ann")
    items = list(queue.items.all())
    for item in items[:6]:  # run A (hq-exact) better on six items
        give_label(item, ann, "right" if item.swapped else "left")
    give_label(items[6], ann, "left" if items[6].swapped else "right")  # run B better once
    for item in items[7:]:
        give_label(item, ann, "equal")
    result = pairwise_queue_result(queue)
    assert (result["wins_a"], result["wins_b"], result["ties"], result["n"]) == (6, 1, 3, 10)
    assert result["sign_test_p"] == pytest.approx(0.125)  # 2·(1+7)/2⁷
    assert result["run_a"] == "hq-exact" and result["run_b"] == "hq-judge"


def test_corrected_answers_become_the_gold_of_a_new_dataset_version(runs):
    exact, _ = runs
    queue = create_queue("hq-exact", name="q", sample=2, seed=4)
    ann = staff("ann")
    first, second = queue.items.select_related("prediction__example")
    give_label(first, ann, "incorrect", corrected_answer="the city of 1")
    give_label(second, ann, "correct")
    change = corrections_to_version(queue, user=ann)
    assert change.number == 2 and change.changed == [first.prediction.example.external_id]
    current = {e.external_id: e.answer for e in examples_at(exact.dataset)}
    assert current[first.prediction.example.external_id] == "the city of 1"
    assert current[second.prediction.example.external_id] == second.prediction.example.answer


def test_bad_inputs_are_clear_errors_and_write_nothing(runs):
    ann, guest = staff("ann"), staff("guest", is_staff=False)
    with pytest.raises(NotFound, match="no run with id 'nope'"):
        create_queue("nope", name="q")
    with pytest.raises(BadInput, match="unknown filter 'best'"):
        create_queue("hq-exact", name="q", filter_name="best")
    with pytest.raises(BadInput, match="has no second scorer"):
        make_run(make_dataset("other"), "lonely", right=set())
        create_queue("lonely", name="q", filter_name="disagree")
    with pytest.raises(BadInput, match="--sample must be at least 1"):
        create_queue("hq-exact", name="q", sample=0)
    with pytest.raises(BadInput, match="different datasets"):
        create_pairwise_queue("hq-exact", "lonely", name="pw")
    assert AnnotationQueue.objects.count() == 0 and QueueItem.objects.count() == 0
    queue = create_queue("hq-exact", name="q", tags=["format"])
    with pytest.raises(BadInput, match="already exists"):
        create_queue("hq-exact", name="q")
    item = queue.items.get(position=1)
    with pytest.raises(BadInput, match="'great' is not in the rubric"):
        give_label(item, ann, "great")
    with pytest.raises(BadInput, match=r"\['typo'\] are not in the taxonomy"):
        give_label(item, ann, "correct", tags=["typo"])
    with pytest.raises(BadInput, match="'guest' is not an active staff user"):
        give_label(item, guest, "correct")
    with pytest.raises(BadInput, match="not an active staff user"):
        claim_next(queue, guest)
    with pytest.raises(BadInput, match="has no corrected answer"):
        corrections_to_version(queue)
    assert HumanLabel.objects.count() == 0 and not QueueItem.objects.filter(claimed_by__isnull=False).exists()
