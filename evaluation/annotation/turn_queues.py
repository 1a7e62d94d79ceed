"""Annotation queues over chat turns: the turns end users rated thumbs down
(docs/architecture.md#annotation-queues; docs/chat.md#feedback).

A queue of kind ``turns`` holds one :class:`~evaluation.models.QueueItem`
per chat turn (``item.turn``, no prediction) whose current feedback of a
rating (``down`` by default) was given at or after ``since``. Reviewers label
them on the same review page as a run's predictions and may write the
answer the agent should have given; :func:`turn_corrections_to_dataset` then
adds each corrected turn to the queue's dataset as an example
(``question_id`` ``turn-N``, the corrected answer its gold) in one new
version, through :func:`evaluation.datasets.from_turns.examples_from_turns`
— the same path as the turn list's "Add to dataset…" action.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from common.errors import BadInput
from common.sampling import seeded_sample
from evaluation.annotation.queues import check_rubric
from evaluation.datasets.from_turns import MAX_TASK_TYPE, TurnPick, TurnsAdded, examples_from_turns
from evaluation.datasets.names import dataset_name_check
from evaluation.models import AnnotationQueue, HumanLabel, QueueItem, default_label_set
from turns.models import FeedbackRating, Turn, TurnFeedback, TurnKind

__all__ = ["RATINGS", "create_turn_queue", "rated_turns", "turn_corrections_to_dataset"]

#: The ratings a turn queue may be made from.
RATINGS = tuple(FeedbackRating.values)


def rated_turns(rating: str, *, since: datetime | None = None) -> list[Turn]:
    """The chat turns with at least one current feedback of ``rating`` given
    at or after ``since`` (``None``: ever), in turn id order. Raises
    ``BadInput`` for a rating that is not ``up`` or ``down``."""
    if rating not in RATINGS:
        raise BadInput(f"unknown rating {rating!r}: use one of {', '.join(RATINGS)}")
    feedback = TurnFeedback.objects.filter(current=True, rating=rating, turn__kind=TurnKind.CHAT)
    if since is not None:
        feedback = feedback.filter(created_at__gte=since)
    ids = feedback.values("turn_id")
    return list(Turn.objects.filter(pk__in=ids).order_by("pk").only("pk", "question", "answer"))


def create_turn_queue(
    *,
    name: str,
    rating: str = FeedbackRating.DOWN,
    since: datetime | None = None,
    dataset_name: str = "",
    task_type: str = "qa",
    sample: int | None = None,
    seed: int | None = None,
    overlap: int = 1,
    labels: Sequence[str] | None = None,
    instructions: str = "",
    tags: Sequence[str] = (),
) -> AnnotationQueue:
    """A queue (kind ``turns``) over :func:`rated_turns` (``sample``: a
    ``random.Random(seed)`` sample of that many, kept in id order) with the
    rubric ``labels`` (default correct / partial / incorrect). Corrected
    answers go to dataset ``dataset_name`` (default: the queue's name) as
    examples of ``task_type``. Raises ``BadInput`` — writing nothing — for a
    taken or blank name, a bad rating, sample, overlap, label set, dataset
    name or task type, or no rated turn to queue."""
    label_set = list(labels) if labels else default_label_set()
    check_rubric(name, label_set, overlap)
    dataset_name = dataset_name_check((dataset_name or name).strip())
    if not task_type.strip() or len(task_type) > MAX_TASK_TYPE:
        raise BadInput(f"the task type must be 1 to {MAX_TASK_TYPE} characters, got {task_type!r}")
    chosen = rated_turns(rating, since=since)
    if sample is not None:
        if sample < 1:
            raise BadInput(f"--sample must be at least 1, got {sample}")
        chosen = seeded_sample(chosen, sample, seed)
    if not chosen:
        when = f" since {since.isoformat()}" if since else ""
        raise BadInput(f"no chat turn is rated {rating!r}{when}: nothing to queue")
    with transaction.atomic():
        queue = AnnotationQueue.objects.create(
            name=name, kind="turns", run=None, filter=f"feedback-{rating}", since=since,
            sample=sample, seed=seed, overlap=overlap, label_set=label_set, instructions=instructions,
            tag_set=list(tags), dataset_name=dataset_name, task_type=task_type.strip(),
        )  # fmt: skip
        QueueItem.objects.bulk_create(
            QueueItem(queue=queue, position=i, turn=t) for i, t in enumerate(chosen, start=1)
        )
    return queue


def turn_corrections_to_dataset(queue: AnnotationQueue, *, user: Any = None) -> TurnsAdded:
    """Add each turn of ``queue`` (kind ``turns``) with a corrected answer (a
    reviewer's current label; the latest wins) to dataset
    ``queue.dataset_name`` — made when there is none — as one new version.
    A turn whose example the dataset already holds (same question, or made
    from that turn) is reported in ``duplicates`` and not changed. Raises
    ``BadInput`` when the queue is not over turns or has no corrected answer;
    nothing is written then."""
    if queue.kind != "turns":
        raise BadInput(f"queue {queue.name!r} is over a run's predictions, not chat turns")
    rows = (
        HumanLabel.objects.filter(item__queue=queue, current=True)
        .exclude(corrected_answer="")
        .select_related("item")
        .order_by("created_at", "pk")
    )
    latest: dict[int, str] = {}
    for row in rows:
        if row.item.turn_id is not None:
            latest[row.item.turn_id] = row.corrected_answer
    if not latest:
        raise BadInput(f"queue {queue.name!r} has no corrected answer")
    picks = [
        TurnPick(turn_id=pk, task_type=queue.task_type, gold=gold) for pk, gold in sorted(latest.items())
    ]
    return examples_from_turns(dataset_name=queue.dataset_name, picks=picks, create=True, user=user)
