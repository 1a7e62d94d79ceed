"""Corrected answers become gold answers of a new dataset version
(docs/architecture.md#dataset-versions; docs/architecture.md#annotation-queues)."""

from __future__ import annotations

import dataclasses
from typing import Any

from common.errors import BadInput
from evaluation.datasets.versions import VersionChange, dataset_change, example_spec
from evaluation.models import AnnotationQueue, Example, HumanLabel

__all__ = ["corrections_to_version"]


def corrections_to_version(queue: AnnotationQueue, *, user: Any = None) -> VersionChange:
    """Make the next version of the queue's dataset in which each example
    with a corrected answer (a reviewer's current label; the latest wins)
    has that answer as its gold. Raises ``BadInput`` when the queue has no
    corrected answer or an example changed since the run (its row is no
    longer current), or when it is not over a run (``turn_queues`` has the chat
    turns' counterpart); nothing is written then."""
    if queue.run is None:
        raise BadInput(f"queue {queue.name!r} is over chat turns: its corrections become new examples")
    rows = (
        HumanLabel.objects.filter(item__queue=queue, current=True)
        .exclude(corrected_answer="")
        .select_related("item__prediction__example")
        .order_by("created_at", "pk")
    )
    latest: dict[str, tuple[Example, str]] = {}
    for row in rows:
        if row.item.prediction is None:  # a run queue's items are predictions
            continue
        example = row.item.prediction.example
        latest[example.external_id] = (example, row.corrected_answer)
    if not latest:
        raise BadInput(f"queue {queue.name!r} has no corrected answer")
    stale = sorted(qid for qid, (example, _) in latest.items() if example.valid_to is not None)
    if stale:
        raise BadInput(f"example(s) {stale} changed since the run: correct them on the current version")
    upserts = [dataclasses.replace(example_spec(e), answer=answer) for e, answer in latest.values()]
    return dataset_change(
        queue.run.dataset, upserts=upserts, source=f"corrected answers of queue {queue.name}", user=user
    )
