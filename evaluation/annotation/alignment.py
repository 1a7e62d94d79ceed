"""Human labels beside automatic scores (docs/architecture.md#annotation-queues).

- :func:`human_accuracy`: a run's human-verified accuracy over its labelled
  predictions, with the automatic accuracy on the same subset and the
  failure-tag counts;
- :func:`judge_report`: how the run's automatic verdicts (the judge's grade,
  or any scorer's correct / incorrect) agree with the human labels —
  agreement, Cohen's κ with its 95 % interval, the confusion matrix, the
  disagreements — per (judge model, rubric) and overall, and the agreement
  between reviewers where several labelled the same predictions;
- :func:`pairwise_queue_result`: a pairwise queue's win rates and sign test.

A prediction labelled by several reviewers (in any single-run queue of the
run) counts once, by the label most of them gave (a tie: the latest label).
A label counts as the verdict it means: itself in a queue whose labels are
correct / partial / incorrect, its ``label_map`` entry in a queue with its own
labels. A queue with its own labels and no map has no verdicts: the judge
report refuses (``BadInput`` naming the queue) rather than compare ``good``
with ``correct`` and report a silent 0 %; human-verified accuracy leaves its
labels out (``unmapped`` counts them).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from common.errors import BadInput
from evaluation.annotation.agreement import cohen_kappa, confusion_table, fleiss_kappa, pairwise_result
from evaluation.annotation.queues import VERDICTS
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import AnnotationQueue, HumanLabel, Prediction, Run

__all__ = [
    "consensus_label",
    "human_accuracy",
    "judge_report",
    "label_verdicts",
    "pairwise_queue_result",
    "run_labels",
]

#: The order of the classes in a confusion matrix (others follow, sorted).
CLASS_ORDER = ("correct", "partial", "incorrect", "unscored")


def run_labels(run: Run) -> dict[int, list[HumanLabel]]:
    """The current labels of ``run``'s predictions (single-run queues), by
    prediction id, oldest first."""
    rows = HumanLabel.objects.filter(
        current=True, item__queue__run=run, item__queue__kind="single"
    ).select_related("reviewer", "item", "item__queue")
    labels: dict[int, list[HumanLabel]] = defaultdict(list)
    for row in rows.order_by("created_at", "pk"):
        if row.item.prediction_id is not None:  # a single-run queue's items are predictions
            labels[row.item.prediction_id].append(row)
    return labels


def label_verdicts(queue: AnnotationQueue) -> dict[str, str] | None:
    """``{label: verdict}`` for ``queue``'s labels: its ``label_map``, else
    each label as itself when every label is a verdict (correct / partial /
    incorrect); ``None`` for a queue with its own labels and no map."""
    if queue.label_map:
        return dict(queue.label_map)
    if set(queue.label_set) <= set(VERDICTS):
        return {label: label for label in queue.label_set}
    return None


def _verdicts(rows: list[HumanLabel]) -> list[str]:
    """What ``rows``' labels mean as verdicts, in order; labels of an unmapped queue left out."""
    found = []
    for row in rows:
        mapping = label_verdicts(row.item.queue)
        if mapping is not None and row.label in mapping:
            found.append(mapping[row.label])
    return found


def consensus_label(rows: list[HumanLabel]) -> str | None:
    """The verdict most of ``rows`` (one prediction's current labels, oldest
    first, read through their queue's label map) give; a tie goes to the
    latest of the tied verdicts; ``None`` when no label of ``rows`` has a
    verdict (a queue with its own labels and no map)."""
    verdicts = _verdicts(rows)
    return _consensus(verdicts) if verdicts else None


def _consensus(verdicts: list[str]) -> str:
    counts = Counter(verdicts)
    best = max(counts.values())
    return next(v for v in reversed(verdicts) if counts[v] == best)


def _refuse_unmapped(labels: dict[int, list[HumanLabel]]) -> None:
    """``BadInput`` naming the first queue whose own labels have no verdict map."""
    queues = {row.item.queue.pk: row.item.queue for rows in labels.values() for row in rows}
    for queue in sorted(queues.values(), key=lambda q: q.name):
        if label_verdicts(queue) is None:
            raise BadInput(
                f"queue {queue.name!r} has its own labels ({', '.join(queue.label_set)}) and no mapping "
                f"to {'/'.join(VERDICTS)}, so they cannot be compared with the automatic verdicts; "
                "make the queue with --label-map LABEL=VERDICT,... (e.g. good=correct,bad=incorrect)"
            )


def automatic_verdict(prediction: Prediction) -> str:
    """The scorer's verdict as a class: the judge's grade when it gave one,
    else ``correct`` / ``incorrect`` from ``correct``, ``unscored`` when ``None``."""
    grade = (prediction.judgement or {}).get("grade")
    if grade in ("correct", "partial", "incorrect"):
        return str(grade)
    if prediction.correct is None:
        return "unscored"
    return "correct" if prediction.correct else "incorrect"


def human_accuracy(run: Run) -> dict[str, Any]:
    """``{"labelled", "human_correct", "human_accuracy", "human_ci",
    "auto_scored", "auto_correct", "auto_accuracy", "auto_ci", "tags",
    "unmapped"}``: human-verified accuracy (verdict ``correct`` over labelled
    predictions, 95 % Wilson interval), the automatic accuracy on the same
    predictions (those of them scored), the failure-tag counts (most first)
    and the labelled predictions left out because their queue's own labels
    have no verdict map."""
    labels = run_labels(run)
    verdicts = {pk: found for pk, rows in labels.items() if (found := _verdicts(rows))}
    predictions = Prediction.objects.filter(pk__in=verdicts).only("pk", "correct")
    human = [_consensus(found) for found in verdicts.values()]
    human_correct = sum(1 for label in human if label == "correct")
    scored = [p.correct for p in predictions if p.correct is not None]
    tags = Counter(tag for rows in labels.values() for row in rows for tag in row.tags)
    return {
        "labelled": len(human),
        "human_correct": human_correct,
        "human_accuracy": human_correct / len(human) if human else None,
        "human_ci": wilson_interval(human_correct, len(human)),
        "auto_scored": len(scored),
        "auto_correct": sum(scored),
        "auto_accuracy": sum(scored) / len(scored) if scored else None,
        "auto_ci": wilson_interval(sum(scored), len(scored)),
        "tags": dict(tags.most_common()),
        "unmapped": len(labels) - len(verdicts),
    }


def _classes(values: set[str]) -> list[str]:
    return [c for c in CLASS_ORDER if c in values] + sorted(values - set(CLASS_ORDER))


def _alignment(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreement, κ and confusion of ``rows`` (each with ``automatic`` and ``human``)."""
    classes = _classes({r["automatic"] for r in rows} | {r["human"] for r in rows})
    table = confusion_table([(r["automatic"], r["human"]) for r in rows], classes)
    kappa = cohen_kappa(table)
    agree = sum(1 for r in rows if r["automatic"] == r["human"])
    return {
        "items": len(rows),
        "agreement": agree / len(rows) if rows else None,
        "agreement_ci": wilson_interval(agree, len(rows)),
        "kappa": kappa["kappa"],
        "kappa_ci_low": kappa["low"],
        "kappa_ci_high": kappa["high"],
        "confusion": {"rows": "automatic", "columns": "human", "classes": classes, "table": table},
    }


def reviewer_agreement(labels: dict[int, list[HumanLabel]]) -> dict[str, Any] | None:
    """Inter-annotator agreement over predictions with two or more
    reviewers: Cohen's κ (with its interval) when exactly two reviewers
    labelled them all, else Fleiss' κ over the items with the most common
    number of reviewers. ``None`` when no prediction has two reviewers."""
    shared = {pk: rows for pk, rows in labels.items() if len(rows) >= 2}
    if not shared:
        return None
    reviewers = {row.reviewer.get_username() for rows in shared.values() for row in rows}
    classes = _classes({row.label for rows in shared.values() for row in rows})
    if len(reviewers) == 2:
        first, second = sorted(reviewers)
        pairs = []
        for rows in shared.values():
            by = {row.reviewer.get_username(): row.label for row in rows}
            pairs.append((by[first], by[second]))
        kappa = cohen_kappa(confusion_table(pairs, classes))
        return {"method": "Cohen's kappa", "reviewers": [first, second], "items": len(pairs), **kappa}
    size = Counter(len(rows) for rows in shared.values()).most_common(1)[0][0]
    counts = [
        [sum(1 for row in rows if row.label == c) for c in classes]
        for rows in shared.values()
        if len(rows) == size
    ]
    return {
        "method": "Fleiss' kappa",
        "reviewers": sorted(reviewers),
        "items": len(counts),
        "kappa": fleiss_kappa(counts),
        "low": None,
        "high": None,
    }


def judge_report(run: Run) -> dict[str, Any]:
    """The run's automatic verdicts against its human labels: the overall
    :func:`_alignment` (``items``, ``agreement``, ``kappa``,
    ``kappa_ci_low``/``high``, ``confusion``) plus ``run``, ``groups`` (the
    same per (judge model, rubric)), ``disagreements`` (``prediction_id``,
    ``question_id``, ``automatic``, ``human``, ``notes``) and
    ``reviewers`` (:func:`reviewer_agreement`). Raises ``BadInput`` when a
    queue of the run has its own labels and no verdict map."""
    labels = run_labels(run)
    _refuse_unmapped(labels)
    predictions = Prediction.objects.filter(pk__in=labels).select_related("example").order_by("pk")
    rubric = (run.dataset.rubric and "dataset rubric") or "default rubric"
    rows = []
    for p in predictions:
        model = (p.judgement or {}).get("model") or f"scorer {p.scorer or '?'}"
        rows.append({
            "prediction_id": p.pk,
            "question_id": p.example.external_id,
            "judge": model,
            "rubric": ((p.example.metadata or {}).get("rubric") and "example rubric") or rubric,
            "automatic": automatic_verdict(p),
            "human": _consensus(_verdicts(labels[p.pk])),
            "notes": [row.note for row in labels[p.pk] if row.note],
        })  # fmt: skip
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(str(row["judge"]), str(row["rubric"]))].append(row)
    return {
        "run": run.run_id,
        **_alignment(rows),
        "groups": [
            {"judge": judge, "rubric": rub, **_alignment(members)}
            for (judge, rub), members in sorted(groups.items())
        ],
        "disagreements": [
            {k: row[k] for k in ("prediction_id", "question_id", "automatic", "human", "notes")}
            for row in rows
            if row["automatic"] != row["human"]
        ],
        "reviewers": reviewer_agreement(labels),
    }


def pairwise_queue_result(queue: AnnotationQueue) -> dict[str, Any]:
    """A pairwise queue's result (:func:`~evaluation.annotation.agreement.pairwise_result`,
    A = ``queue.run``, B = ``queue.other_run``) over its current labels, each
    ``left``/``right`` mapped back through the item's hidden order; with
    ``run_a`` and ``run_b``."""
    wins_a = wins_b = ties = 0
    for row in HumanLabel.objects.filter(item__queue=queue, current=True).select_related("item"):
        if row.label == "equal":
            ties += 1
        elif (row.label == "left") != row.item.swapped:
            wins_a += 1
        else:
            wins_b += 1
    other = queue.other_run.run_id if queue.other_run else None
    run_a = queue.run.run_id if queue.run else None  # a pairwise queue has both runs
    return {"run_a": run_a, "run_b": other, **pairwise_result(wins_a, wins_b, ties)}
