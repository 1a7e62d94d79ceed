"""Labels from a CSV file — for scripts and teams that label elsewhere
(``manage.py annotation_queue import Q FILE.csv``; docs/architecture.md#annotation-queues).

Columns ``question_id``, ``reviewer``, ``label`` and optionally ``tags``
(separated by ``;`` or ``|``) and ``note``. The whole file is checked before
anything is written: an unknown column set, a question that is not in the
queue, a reviewer who is not an active staff user, a label or tag outside
the rubric, an item held by someone else, a (question, reviewer) twice —
each a ``BadInput`` naming the line, and nothing written.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from common.errors import AgentLabError, BadInput, NotFound
from evaluation.annotation.labelling import check_label, check_reviewer, give_label
from evaluation.models import AnnotationQueue, QueueItem

__all__ = ["import_labels"]

REQUIRED = ("question_id", "reviewer", "label")
OPTIONAL = ("tags", "note")


@dataclass
class _Row:
    line: int
    item: QueueItem
    reviewer: User
    label: str
    tags: list[str]
    note: str


def _tags(raw: str) -> list[str]:
    return [t.strip() for t in raw.replace("|", ";").split(";") if t.strip()]


def _read(path: Path) -> list[dict[str, str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {path}: {exc}") from exc
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in columns]
    unknown = [c for c in columns if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        raise BadInput(
            f"{path}: line 1: columns must be {', '.join(REQUIRED)} and optionally "
            f"{', '.join(OPTIONAL)} (missing {missing}, unknown {unknown})"
        )
    return list(reader)


def _check_row(queue: AnnotationQueue, items: dict[str, QueueItem], raw: dict[str, str]) -> _Row:
    qid, name = (raw.get("question_id") or "").strip(), (raw.get("reviewer") or "").strip()
    label = (raw.get("label") or "").strip()
    item = items.get(qid)
    if item is None:
        raise BadInput(f"question_id {qid!r} is not an item of queue {queue.name!r}")
    reviewer = get_user_model().objects.filter(username=name).first()
    if reviewer is None:
        raise BadInput(f"no user named {name!r}")
    check_reviewer(reviewer)
    tags = _tags(raw.get("tags") or "")
    check_label(queue, label, tags)
    now = timezone.now()
    if item.claimed_by_id not in (None, reviewer.pk) and item.claimed_until and item.claimed_until > now:
        raise BadInput(f"question_id {qid!r} is held by another reviewer")
    return _Row(0, item, reviewer, label, tags, (raw.get("note") or "").strip())


def import_labels(queue_name: str, path: Path) -> int:
    """Check every row of ``path`` then record them all (``give_label``);
    returns the number of labels written. Raises ``NotFound`` for an unknown
    queue and ``BadInput`` ``"FILE: line N: …"`` for the first bad row —
    nothing written then."""
    queue = AnnotationQueue.objects.filter(name=queue_name).first()
    if queue is None:
        raise NotFound(f"no annotation queue named {queue_name!r}")
    if queue.kind != "single":
        raise BadInput(f"queue {queue_name!r} is {queue.kind}: import labels into a single-run queue")
    items = {
        item.prediction.example.external_id: item
        for item in queue.items.select_related("prediction__example", "queue").filter(prediction__epoch=1)
        if item.prediction is not None  # a single-run queue's items are all predictions
    }
    question_ids = {item.pk: qid for qid, item in items.items()}
    rows: list[_Row] = []
    seen: set[tuple[str, str]] = set()
    for line, raw in enumerate(_read(path), start=2):
        try:
            row = _check_row(queue, items, raw)
            key = (question_ids[row.item.pk], row.reviewer.get_username())
            if key in seen:
                raise BadInput(f"question_id {key[0]!r} is labelled twice by {key[1]!r}")
        except AgentLabError as exc:
            raise BadInput(f"{path}: line {line}: {exc}") from exc
        seen.add(key)
        row.line = line
        rows.append(row)
    if not rows:
        raise BadInput(f"{path}: no labels to import")
    with transaction.atomic():
        for row in rows:
            give_label(row.item, row.reviewer, row.label, tags=row.tags, note=row.note)
    return len(rows)
