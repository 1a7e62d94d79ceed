"""A run's judge-corrected accuracy from its randomly drawn annotation queues
(issue 43; docs/evaluating.md#judge-corrected-accuracy): the rows are loaded
here, the estimate is ``evaluation.annotation.prediction_powered.ppi_mean``.

A queue is a uniform random sample of the run's predictions when it was made
with the filter ``all`` (every prediction, or a seeded ``--sample`` of them):
the queue records its filter, sample and seed (``AnnotationQueue``). Any
other filter picks predictions by what they are (wrong, judged, …), and a
correction learnt on them would be biased: such a queue is refused.
"""

from __future__ import annotations

from typing import Any

from common.errors import BadInput, NotFound
from evaluation.annotation.alignment import consensus_label
from evaluation.annotation.prediction_powered import ppi_mean
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import AnnotationQueue, HumanLabel, Run

__all__ = ["MEANINGS", "judge_corrected_accuracy", "random_queues"]

#: What each of the three accuracies means, said plainly (the page and the text show it).
MEANINGS = {
    "judge": "the judge's accuracy: the share of all scored predictions the judge called correct — "
    "precise, but off by whatever the judge gets wrong",
    "human": "the human-verified accuracy: the share of the randomly drawn, human-labelled predictions "
    "the reviewers called correct — unbiased, but only as precise as that sample",
    "corrected": "the judge-corrected accuracy (prediction-powered inference): the judge's verdicts "
    "on every prediction, corrected by the judge's errors measured on the labelled sample — unbiased, "
    "and narrower than the human accuracy when the judge mostly agrees with the reviewers",
}


def _refusal(queue: AnnotationQueue) -> str | None:
    """Why ``queue`` is not a uniform random sample of its run, or ``None``."""
    if queue.kind != "single":
        return f"queue {queue.name!r} is a {queue.kind} queue (it compares two runs)"
    if queue.filter != "all":
        return (
            f"queue {queue.name!r} was drawn with --filter {queue.filter}: it holds predictions chosen for "
            "what they are, not a uniform random sample of the run's"
        )
    return None


def random_queues(run: Run, queue_name: str | None = None) -> list[AnnotationQueue]:
    """The queues of ``run`` whose labels the correction rests on: the one
    named ``queue_name`` (``NotFound`` when there is none on the run;
    ``BadInput`` when it is not a uniform random sample), else every
    single-run queue of the run made with the filter ``all``."""
    if queue_name is None:
        return list(run.annotation_queues.filter(kind="single", filter="all").order_by("pk"))
    queue = AnnotationQueue.objects.filter(name=queue_name, run=run).first()
    if queue is None:
        raise NotFound(f"no annotation queue named {queue_name!r} on run {run.run_id!r}")
    refusal = _refusal(queue)
    if refusal:
        raise BadInput(
            f"{refusal}; a judge-corrected accuracy needs a uniform random sample: make a queue with "
            "--filter all (and --sample N --seed S)"
        )
    return [queue]


def _unavailable(reason: str, queues: list[AnnotationQueue]) -> dict[str, Any]:
    return {"available": False, "reason": reason, "queues": [q.name for q in queues], "meanings": MEANINGS}


def judge_corrected_accuracy(run: Run, queue_name: str | None = None) -> dict[str, Any]:
    """The run's three accuracies side by side, from the labels of
    :func:`random_queues`: ``{"available": True, "queues", "labelled",
    "unlabelled", "unscored", "judge_accuracy", "judge_ci", "human_accuracy",
    "human_ci", "estimate", "ci_low", "ci_high", "lam", "method",
    "meanings"}`` (accuracies 0..1, intervals 95 %; ``unscored``: predictions
    the judge could not score, left out as from the run's accuracy), or
    ``{"available": False, "reason", "queues", "meanings"}`` when there is no
    random queue or too few labels. Raises as :func:`random_queues`."""
    queues = random_queues(run, queue_name)
    if not queues:
        return _unavailable(
            "no annotation queue of this run is a uniform random sample (--filter all)", queues
        )
    rows = HumanLabel.objects.filter(current=True, item__queue__in=queues).select_related("item")
    by_prediction: dict[int, list[HumanLabel]] = {}
    for row in rows.order_by("created_at", "pk"):
        if row.item.prediction_id is not None:  # a run's queue: its items are predictions
            by_prediction.setdefault(row.item.prediction_id, []).append(row)
    verdicts = dict(run.predictions.values_list("pk", "correct"))
    scored = {pk: float(bool(c)) for pk, c in verdicts.items() if c is not None}
    labelled = [pk for pk in sorted(by_prediction) if pk in scored]
    human = [1.0 if consensus_label(by_prediction[pk]) == "correct" else 0.0 for pk in labelled]
    judge = [scored[pk] for pk in labelled]
    unlabelled = [v for pk, v in scored.items() if pk not in by_prediction]
    if len(labelled) < 2 or len(unlabelled) < 2:
        return _unavailable(
            f"{len(labelled)} labelled and {len(unlabelled)} unlabelled scored predictions: "
            "it needs at least 2 of each",
            queues,
        )
    estimate = ppi_mean(human, judge, unlabelled, lam=1.0)  # PPI: see prediction_powered's docstring
    judged_correct, human_correct = int(sum(scored.values())), int(sum(human))
    return {
        "available": True,
        "queues": [q.name for q in queues],
        "labelled": len(labelled),
        "unlabelled": len(unlabelled),
        "unscored": len(verdicts) - len(scored),
        "judge_accuracy": judged_correct / len(scored),
        "judge_ci": wilson_interval(judged_correct, len(scored)),
        "human_accuracy": human_correct / len(labelled),
        "human_ci": wilson_interval(human_correct, len(labelled)),
        "estimate": estimate.estimate,
        "ci_low": estimate.ci_low,
        "ci_high": estimate.ci_high,
        "lam": estimate.lam,
        "method": "prediction-powered mean, lambda 1 (Angelopoulos, Bates, Fannjiang, Jordan & Zrnic 2023, "
        "Science 382:669), 95% normal interval",
        "meanings": MEANINGS,
    }
