"""Rows for the annotation tests (issue 30): a dataset of HotpotQA-like
questions, a run scored by exact match and its rescore by the judge, staff."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from evaluation.models import Dataset, Example, Prediction, Run, RunStatus


def make_dataset(name: str = "capitals", n: int = 10) -> Dataset:
    """``n`` examples ``q0``…: "Which city is capital number i?", gold ``city i``."""
    dataset = Dataset.objects.create(name=name)
    Example.objects.bulk_create(
        Example(
            dataset=dataset,
            external_id=f"q{i}",
            position=i,
            question=f"Which city is capital number {i}?",
            answer=f"city {i}",
            task_type="document_qa",
        )
        for i in range(n)
    )
    return dataset


def make_run(
    dataset: Dataset,
    run_id: str,
    *,
    right: set[int],
    judge: dict[int, str] | None = None,
    unscored: set[int] = frozenset(),  # type: ignore[assignment]
    rescored_from: Run | None = None,
) -> Run:
    """A finished run with one prediction per example: right on ``right``;
    ``judge``: the judge's grade per example index (scorer ``judge``);
    ``unscored``: examples left unscored."""
    run = Run.objects.create(
        run_id=run_id,
        dataset=dataset,
        status=RunStatus.SUCCESS,
        finished_at=timezone.now(),
        rescored_from=rescored_from,
    )
    rows = []
    for i, example in enumerate(dataset.examples.order_by("position")):
        grade = (judge or {}).get(i)
        correct = None if i in unscored else (grade == "correct" if grade else i in right)
        rows.append(
            Prediction(
                run=run,
                example=example,
                task_type=example.task_type,
                prediction=f"city {i}" if i in right else f"town {i}",
                gold_answer=example.answer,
                scorer="judge" if judge else "exact",
                score=None if correct is None else float(correct),
                correct=correct,
                judgement={"model": "judge-model", "grade": grade} if grade else {},
                evidence=f"passage {i}",
                reasoning=f"looked up capital {i}",
                stop_reason="final",
                completed_at=timezone.now(),
            )
        )
    Prediction.objects.bulk_create(rows)
    return run


def staff(name: str, *, is_staff: bool = True) -> Any:
    """A user ``name`` (password ``pw-<name>-123``), staff unless told."""
    return get_user_model().objects.create_user(name, password=f"pw-{name}-123", is_staff=is_staff)
