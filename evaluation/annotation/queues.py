"""Making an annotation queue from a run's predictions (docs/architecture.md#annotation-queues).

A filter picks the predictions (:data:`FILTERS`), an optional seeded sample
of N keeps a reproducible subset (``random.Random(seed).sample`` over the
filtered predictions in id order), and each becomes a :class:`QueueItem`. A
pairwise queue pairs two runs' predictions of the same example and epoch,
each item shown in a random order (``swapped``) the reviewer does not see.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from django.db import transaction
from django.db.models import QuerySet

from common.errors import BadInput, NotFound
from common.sampling import seeded_sample
from evaluation.models import AnnotationQueue, Prediction, QueueItem, Run, default_label_set

__all__ = [
    "FILTERS",
    "PAIRWISE_LABELS",
    "VERDICTS",
    "check_rubric",
    "create_pairwise_queue",
    "create_queue",
    "queue_predictions",
]

#: The filters a queue is made with.
FILTERS = ("all", "wrong", "judged", "unscored", "disagree")
#: The label set of a pairwise queue.
PAIRWISE_LABELS = ["left", "equal", "right"]
#: What a label of a queue with its own labels maps to, for the judge report (``label_map``).
VERDICTS = ("correct", "partial", "incorrect")


def _run(run_id: str) -> Run:
    run = Run.objects.filter(run_id=run_id).first()
    if run is None:
        raise NotFound(f"no run with id {run_id!r}")
    return run


def _disagreeing(run: Run) -> QuerySet[Prediction]:
    """The predictions of ``run`` whose ``correct`` differs from the other
    scorer's verdict: the run it was rescored from, else its latest rescore."""
    other = run.rescored_from or run.rescores.order_by("-created_at").first()
    if other is None:
        raise BadInput(
            f"filter 'disagree': run {run.run_id!r} has no second scorer (it was not rescored, "
            "nor rescored from another run)"
        )
    verdicts = {
        (p.example_id, p.epoch): p.correct
        for p in Prediction.objects.filter(run=other).only("example_id", "epoch", "correct")
    }
    keep = [
        p.pk
        for p in run.predictions.only("pk", "example_id", "epoch", "correct")
        if (p.example_id, p.epoch) in verdicts and verdicts[(p.example_id, p.epoch)] != p.correct
    ]
    return Prediction.objects.filter(pk__in=keep)


def queue_predictions(
    run: Run, filter_name: str, *, sample: int | None = None, seed: int | None = None
) -> list[Prediction]:
    """The predictions of ``run`` a queue with ``filter_name`` holds, in id
    order (``sample``: a ``random.Random(seed)`` sample of that many of them,
    kept in id order; all when fewer). Raises ``BadInput`` for an unknown
    filter, a sample below 1, or ``disagree`` on a run with one scorer."""
    if filter_name not in FILTERS:
        raise BadInput(f"unknown filter {filter_name!r}: use one of {', '.join(FILTERS)}")
    predictions: QuerySet[Prediction] = {
        "all": lambda: run.predictions.all(),
        "wrong": lambda: run.predictions.filter(correct=False),
        "judged": lambda: run.predictions.filter(scorer="judge"),
        "unscored": lambda: run.predictions.filter(correct__isnull=True),
        "disagree": lambda: _disagreeing(run),
    }[filter_name]()
    chosen = list(predictions.order_by("pk"))
    if sample is not None:
        if sample < 1:
            raise BadInput(f"--sample must be at least 1, got {sample}")
        chosen = seeded_sample(chosen, sample, seed)
    return chosen


def check_rubric(name: str, labels: Sequence[str], overlap: int) -> None:
    """``BadInput`` for a blank or taken queue ``name``, a label set of fewer
    than two distinct non-empty labels, or an ``overlap`` below 1."""
    if not name.strip():
        raise BadInput("a queue needs a name")
    if AnnotationQueue.objects.filter(name=name).exists():
        raise BadInput(f"an annotation queue named {name!r} already exists")
    if len(set(labels)) < 2 or any(not str(label).strip() for label in labels):
        raise BadInput(f"the label set needs at least two distinct, non-empty labels, got {list(labels)}")
    if overlap < 1:
        raise BadInput(f"--overlap must be at least 1, got {overlap}")


def _check_label_map(labels: Sequence[str], label_map: Mapping[str, str]) -> None:
    """``BadInput`` unless ``label_map`` maps every label of ``labels``, and
    nothing else, to one of :data:`VERDICTS`."""
    unknown = [label for label in label_map if label not in labels]
    if unknown:
        raise BadInput(f"--label-map names label(s) {unknown} that are not in the label set {list(labels)}")
    wrong = {label: v for label, v in label_map.items() if v not in VERDICTS}
    if wrong:
        raise BadInput(f"--label-map maps {wrong}: each label maps to one of {', '.join(VERDICTS)}")
    missing = [label for label in labels if label not in label_map]
    if missing:
        raise BadInput(
            f"--label-map leaves label(s) {missing} unmapped: map every label to one of {', '.join(VERDICTS)}"
        )


def create_queue(
    run_id: str,
    *,
    name: str,
    filter_name: str = "all",
    sample: int | None = None,
    seed: int | None = None,
    overlap: int = 1,
    labels: Sequence[str] | None = None,
    label_map: Mapping[str, str] | None = None,
    instructions: str = "",
    tags: Sequence[str] = (),
) -> AnnotationQueue:
    """A single-run queue over ``run_id``'s predictions (:func:`queue_predictions`)
    with the rubric ``labels`` (default correct / partial / incorrect),
    ``instructions`` and failure-tag taxonomy ``tags``. ``label_map``: what
    each of the queue's own labels means as a verdict (``{"good": "correct",
    "bad": "incorrect"}``), so the judge report and human-verified accuracy
    can count them; without it a queue with its own labels is left out of
    them. Raises ``NotFound`` for an unknown run, ``BadInput`` for a taken
    name, a bad filter, sample, overlap, label set or label map, or no
    prediction to queue; nothing is written then."""
    run = _run(run_id)
    label_set = list(labels) if labels else default_label_set()
    check_rubric(name, label_set, overlap)
    if label_map:
        _check_label_map(label_set, label_map)
    chosen = queue_predictions(run, filter_name, sample=sample, seed=seed)
    if not chosen:
        raise BadInput(f"filter {filter_name!r} leaves no prediction of run {run_id!r} to queue")
    with transaction.atomic():
        queue = AnnotationQueue.objects.create(
            name=name,
            run=run,
            filter=filter_name,
            sample=sample,
            seed=seed,
            overlap=overlap,
            label_set=label_set,
            label_map=dict(label_map or {}),
            instructions=instructions,
            tag_set=list(tags),
        )
        QueueItem.objects.bulk_create(
            QueueItem(queue=queue, position=i, prediction=p) for i, p in enumerate(chosen, start=1)
        )
    return queue


def create_pairwise_queue(
    left_run_id: str,
    right_run_id: str,
    *,
    name: str,
    seed: int | None = None,
    overlap: int = 1,
    instructions: str = "",
) -> AnnotationQueue:
    """A pairwise queue: ``left_run_id``'s and ``right_run_id``'s predictions
    of each example (and epoch) both answered, side by side in a
    ``random.Random(seed)`` order per item. Raises ``NotFound`` for an
    unknown run and ``BadInput`` for one run twice, runs on different
    datasets or no example in common; nothing is written then."""
    run, other = _run(left_run_id), _run(right_run_id)
    if run.pk == other.pk:
        raise BadInput(f"a pairwise queue compares two runs, got {left_run_id!r} twice")
    if run.dataset_id != other.dataset_id:
        raise BadInput(
            f"runs {left_run_id!r} and {right_run_id!r} are on different datasets "
            f"({run.dataset.name} and {other.dataset.name}): a pairwise queue pairs the same examples"
        )
    check_rubric(name, PAIRWISE_LABELS, overlap)
    theirs = {(p.example_id, p.epoch): p for p in other.predictions.all()}
    pairs = [
        (p, theirs[(p.example_id, p.epoch)])
        for p in run.predictions.order_by("pk")
        if (p.example_id, p.epoch) in theirs
    ]
    if not pairs:
        raise BadInput(f"runs {left_run_id!r} and {right_run_id!r} have no example in common")
    rng = random.Random(seed)
    with transaction.atomic():
        queue = AnnotationQueue.objects.create(
            name=name, kind="pairwise", run=run, other_run=other, seed=seed, overlap=overlap,
            label_set=PAIRWISE_LABELS, instructions=instructions,
        )  # fmt: skip
        QueueItem.objects.bulk_create(
            QueueItem(queue=queue, position=i, prediction=a, other_prediction=b, swapped=rng.random() < 0.5)
            for i, (a, b) in enumerate(pairs, start=1)
        )
    return queue
