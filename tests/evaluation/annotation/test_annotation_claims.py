"""Annotation claims under concurrency (issue 47, item 2), on the real
database: eight reviewers looping "next item → label" over an 80-item queue
with overlap 1 are given 80 items between them and every item gets exactly
one label — with threads and with processes — and a claim that waited for a
concurrent labeller's commit fails when that label filled the item."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections, transaction

from common.errors import StateConflict
from evaluation.annotation.labelling import claim, give_label, next_item
from evaluation.annotation.queues import create_queue
from evaluation.models import AnnotationQueue, HumanLabel, QueueItem
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff
from tests.evaluation.run.process_support import database_env

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS, REVIEWERS = 80, 8


@pytest.fixture
def queue() -> AnnotationQueue:
    """An 80-item queue, overlap 1, and eight staff reviewers ``r0``…``r7``."""
    make_run(make_dataset(n=ITEMS), "claims", right=set(range(0, ITEMS, 2)))
    for i in range(REVIEWERS):
        staff(f"r{i}")
    return create_queue("claims", name="claims")


def _assert_each_item_labelled_once(given: list[int]) -> None:
    per_item = Counter(HumanLabel.objects.filter(current=True).values_list("item__position", flat=True))
    assert sorted(per_item) == list(range(1, ITEMS + 1))  # positions count from 1
    assert set(per_item.values()) == {1}, {p: n for p, n in per_item.items() if n > 1}
    assert sorted(given) == list(range(1, ITEMS + 1))  # 80 items given, none twice
    assert set(QueueItem.objects.values_list("label_count", flat=True)) == {1}


def _review_in_thread(queue: AnnotationQueue, username: str) -> list[int]:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=username)
    given = []
    try:
        while (item := next_item(queue, user)) is not None:
            give_label(item, user, "correct")
            given.append(item.position)
    finally:
        connection.close()
    return given


def test_eight_reviewer_threads_label_each_item_once(queue):
    with ThreadPoolExecutor(REVIEWERS) as pool:
        lists = list(pool.map(lambda i: _review_in_thread(queue, f"r{i}"), range(REVIEWERS)))
    _assert_each_item_labelled_once([p for given in lists for p in given])


def test_eight_reviewer_processes_label_each_item_once(queue):
    env, start = database_env(), f"{time.time() + 15:.3f}"  # every child has set Django up by then
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.evaluation.annotation.claim_reviewer", "claims", f"r{i}", start],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(REVIEWERS)
    ]
    given = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        given += [int(line) for line in out.split()]
    _assert_each_item_labelled_once(given)


def test_a_claim_waiting_on_a_labellers_commit_fails_once_the_label_fills_the_item(queue):
    """Bob's claim blocks on the row Ann is labelling; when her transaction
    commits the item has its one label, and his claim must not win it (a
    check of the labels table in a subquery would still see no label)."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    item = queue.items.get(position=1)
    labelled, release = threading.Event(), threading.Event()

    def ann() -> None:
        try:
            with transaction.atomic():
                give_label(item, users.get(username="r0"), "correct")
                labelled.set()
                release.wait(10)
        finally:
            connections.close_all()

    def bob() -> str:
        try:
            claim(QueueItem.objects.select_related("queue").get(pk=item.pk), users.get(username="r1"))
        except StateConflict as exc:
            return str(exc)
        finally:
            connections.close_all()
        return "won"

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ann)
        assert labelled.wait(10)
        second = pool.submit(bob)
        time.sleep(0.5)  # bob's UPDATE is waiting on ann's row lock
        release.set()
        first.result(10)
        assert (
            second.result(10)
            == "item 1 of queue 'claims' is held by another reviewer or already has its 1 label(s)"
        )
    assert HumanLabel.objects.filter(item=item).count() == 1


def test_an_item_with_its_labels_cannot_be_claimed_again(queue):
    ann, bob = (staff_user(n) for n in ("r0", "r1"))
    item = next_item(queue, ann)
    assert item is not None
    give_label(item, ann, "correct")
    with pytest.raises(StateConflict, match="already has its 1 label"):
        claim(item, bob)
    give_label(item, ann, "incorrect")  # ann may still change her own label
    assert list(HumanLabel.objects.filter(item=item, current=True).values_list("label", flat=True)) == [
        "incorrect"
    ]
    item.refresh_from_db()
    assert item.label_count == 1


def staff_user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=name)
