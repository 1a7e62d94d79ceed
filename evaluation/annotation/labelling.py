"""Reviewing a queue: the held claim, labels with their history, progress
(docs/architecture.md#annotation-queues).

An item is held by one reviewer at a time: :func:`claim` is one conditional
UPDATE of the item's own row — free (or expired, or already the caller's)
*and* still short of its ``queue.overlap`` labels (``QueueItem.label_count``,
kept by :func:`give_label` in the transaction that writes the label) or
already labelled by the caller — that succeeds for one reviewer only
(healthchecks' ``filter(...).update()`` with ``if num_updated != 1``). The
overlap test reads no other table, so PostgreSQL rechecks it on the row a
concurrent labeller just committed (READ COMMITTED re-evaluates the WHERE
clause on the new row version, but a subquery on the labels table would
still see the statement's old snapshot). Of two staff asking at once one
wins and the other gets the next item. The claim lasts :data:`CLAIM_SECONDS`
and ends when the holder labels the item. A reviewer is never given an item
twice, and an item never gets more than ``overlap`` reviewers.
A label is a row; changing it adds a row and keeps the old one
(``current`` False), so the history says who said what, when.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, Exists, F, Q
from django.utils import timezone

from common.errors import BadInput, NotFound, StateConflict
from evaluation.models import AnnotationQueue, HumanLabel, QueueItem

__all__ = [
    "CLAIM_SECONDS",
    "check_label",
    "check_reviewer",
    "claim",
    "give_label",
    "label_history",
    "next_item",
    "progress",
    "queue_item",
]

#: How long a claim holds an item (seconds).
CLAIM_SECONDS = 600


def check_reviewer(user: Any) -> None:
    """``BadInput`` unless ``user`` is an active staff user."""
    if not (getattr(user, "is_active", False) and getattr(user, "is_staff", False)):
        name = getattr(user, "username", None) or "anonymous"
        raise BadInput(f"reviewer {name!r} is not an active staff user: only staff label")


def check_label(queue: AnnotationQueue, label: str, tags: Sequence[str]) -> None:
    """``BadInput`` for a label outside ``queue``'s label set or a tag outside its taxonomy."""
    if label not in queue.label_set:
        raise BadInput(f"label {label!r} is not in the rubric of queue {queue.name!r}: {queue.label_set}")
    unknown = [t for t in tags if t not in queue.tag_set]
    if unknown:
        raise BadInput(f"tag(s) {unknown} are not in the taxonomy of queue {queue.name!r}: {queue.tag_set}")


def _free(user: User, now: Any) -> Q:
    return Q(claimed_by__isnull=True) | Q(claimed_until__lt=now) | Q(claimed_by=user)


def _wanted(item: QueueItem, user: User) -> Q:
    """Still short of its overlap, or labelled by ``user`` already (a change of label)."""
    own = HumanLabel.objects.filter(item_id=item.pk, reviewer=user, current=True)
    return Q(label_count__lt=item.queue.overlap) | Q(Exists(own))


def claim(item: QueueItem, user: User) -> None:
    """Hold ``item`` for ``user`` for :data:`CLAIM_SECONDS`: one conditional
    UPDATE. Raises ``StateConflict`` when another reviewer's claim on it is
    live or it already has its ``overlap`` labels from other reviewers."""
    check_reviewer(user)
    now = timezone.now()
    won = QueueItem.objects.filter(_free(user, now), _wanted(item, user), pk=item.pk).update(
        claimed_by=user, claimed_until=now + timedelta(seconds=CLAIM_SECONDS)
    )
    if won != 1:
        raise StateConflict(
            f"item {item.position} of queue {item.queue.name!r} is held by another reviewer "
            f"or already has its {item.queue.overlap} label(s)"
        )
    item.refresh_from_db(fields=["claimed_by", "claimed_until", "label_count"])


def next_item(queue: AnnotationQueue, user: User) -> QueueItem | None:
    """Claim and return the first item of ``queue`` that ``user`` has not
    labelled, wants more reviewers and nobody else holds (``None``: none
    left for ``user``). An item ``user`` already holds comes first."""
    check_reviewer(user)
    now = timezone.now()
    mine = HumanLabel.objects.filter(reviewer=user, current=True, item__queue=queue).values("item_id")
    held = queue.items.filter(claimed_by=user, claimed_until__gte=now).exclude(pk__in=mine)
    candidates = (
        queue.items.filter(label_count__lt=queue.overlap).exclude(pk__in=mine).filter(_free(user, now))
    )
    for item in [*held[:1], *candidates.order_by("position")[:20]]:
        try:
            claim(item, user)
        except StateConflict:
            continue  # taken between the read and the update: try the next
        return item
    return None


def give_label(
    item: QueueItem,
    user: User,
    label: str,
    *,
    tags: Sequence[str] = (),
    note: str = "",
    corrected_answer: str = "",
) -> HumanLabel:
    """Record ``user``'s ``label`` (with ``tags``, ``note``, ``corrected_answer``)
    of ``item`` and release the claim; a label ``user`` gave before stays in
    the history (``current`` False). Raises ``BadInput`` for a non-staff
    reviewer or a label or tag outside the rubric, ``StateConflict`` when
    another reviewer holds the item; nothing is written then."""
    check_reviewer(user)
    check_label(item.queue, label, tags)
    with transaction.atomic():
        claim(item, user)
        replaced = HumanLabel.objects.filter(item=item, reviewer=user, current=True).update(current=False)
        row = HumanLabel.objects.create(
            item=item, reviewer=user, label=label, tags=list(tags), note=note,
            corrected_answer=corrected_answer.strip(),
        )  # fmt: skip
        QueueItem.objects.filter(pk=item.pk).update(
            claimed_by=None, claimed_until=None, label_count=F("label_count") + (0 if replaced else 1)
        )
    return row


def label_history(item: QueueItem) -> list[dict[str, Any]]:
    """Every label of ``item``, oldest first: ``{"reviewer", "label", "tags",
    "note", "corrected_answer", "current", "at"}``."""
    return [
        {
            "reviewer": row.reviewer.get_username(),
            "label": row.label,
            "tags": row.tags,
            "note": row.note,
            "corrected_answer": row.corrected_answer,
            "current": row.current,
            "at": row.created_at,
        }
        for row in item.labels.select_related("reviewer")
    ]


def progress(queue: AnnotationQueue) -> dict[str, int]:
    """``{"items", "labelled", "done"}``: items, items with at least one
    current label, items with ``overlap`` current labels."""
    counted = queue.items.annotate(n=Count("labels", filter=Q(labels__current=True)))
    return {
        "items": counted.count(),
        "labelled": counted.filter(n__gte=1).count(),
        "done": counted.filter(n__gte=queue.overlap).count(),
    }


def queue_item(queue_pk: int, position: int) -> QueueItem:
    """Item ``position`` of queue ``queue_pk``; ``NotFound`` when there is none."""
    item = QueueItem.objects.select_related("queue").filter(queue_id=queue_pk, position=position).first()
    if item is None:
        raise NotFound(f"queue {queue_pk} has no item {position}")
    return item
