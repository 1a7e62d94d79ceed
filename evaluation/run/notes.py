"""What ``run_eval`` says once a run is planned (its plan line) and the
review setting it resolves."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from django.conf import settings

from agentlab.agent.types import LLMProvider
from evaluation.datasets.spec import gold_display
from evaluation.datasets.subsets import subset_words
from evaluation.models import Dataset, Run
from evaluation.run.request import EvalRequest
from turns.driver.policies import EvaluationPolicy


def review_resolved(
    request: EvalRequest, *, existing: dict[str, Any] | None, provider: LLMProvider
) -> tuple[EvalRequest, bool]:
    """``request`` with ``review`` decided: as asked, else the run's own on a
    resume, else ``AGENTLAB_REVIEW``, else the provider's default
    (``review_by_default``) — the run records what it is. The flag says
    whether it is the provider's default (the plan line then says why)."""
    asked = request.review if request.review is not None else (existing or {}).get("review")
    review = EvaluationPolicy(review=None if asked is None else bool(asked)).review_enabled(provider)
    return replace(request, review=review), asked is None and settings.AGENTLAB_REVIEW is None


def plan_line(
    run: Run,
    dataset: Dataset,
    provider: LLMProvider,
    *,
    review: bool,
    planned: int,
    skipped: int,
    resumed: bool,
    review_default: bool,
) -> str:
    """The line ``run_eval`` writes once the run is planned: what is to do,
    the model, and whether answers are reviewed (and why not, when that is
    the embedded model's default)."""
    in_run = run.predictions.count()
    subset = subset_words(run.config.get("split"), run.config.get("tags") or ())
    return (
        f"run {shlex.quote(run.run_id)} on {dataset.name}@{run.dataset_version}"
        + (f" ({subset})" if subset else "")
        + ": "
        f"{planned} to do, {skipped} already done"
        + (" (resumed)" if resumed else "")
        + (f"; {run.config['epochs']} epochs per example" if int(run.config.get("epochs") or 1) > 1 else "")
        + f"; {provider.name} model {provider.model}"
        # a smaller --limit on a resume plans fewer examples than the run
        # holds, but the metrics are over all of its rows
        + (
            f"; the metrics cover all {in_run} predictions of the run, not only these {planned + skipped}"
            if in_run > planned + skipped
            else ""
        )
        + _review_words(review, provider_default=review_default)
    )


def _review_words(review: bool, *, provider_default: bool) -> str:
    """``; review on|off`` and, when off is the provider's own default, why."""
    if provider_default and not review:
        return "; review off (the embedded model's default: its reviewer did not help; --review turns it on)"
    return f"; review {'on' if review else 'off'}"


#: Wrong answers listed at the end of a demo run, at most.
DEMO_WRONG_SHOWN = 30


def demo_epilogue(run: Run) -> list[str]:
    """What ``run_eval demo`` (``make demo``) prints last: the examples it got
    wrong (question id, task type, its answer, the gold; at most
    ``DEMO_WRONG_SHOWN``) and the next steps of the README's tour, with the
    admin URL of this run's report on ``runserver``'s default address."""
    wrong = list(
        run.predictions.filter(correct=False)
        .select_related("example")
        .order_by("example__position", "epoch")
        .values_list("example__external_id", "task_type", "epoch", "prediction", "gold_answer", "stop_reason")
    )
    lines = [f"Wrong answers ({len(wrong)}):" if wrong else "Wrong answers: none."]
    for qid, task_type, epoch, answer, gold, stop in wrong[:DEMO_WRONG_SHOWN]:
        said = repr(answer) if answer else f"no answer ({stop})"
        lines.append(f"  {qid} ({task_type}, epoch {epoch}): answered {said}; gold {gold_display(gold)!r}")
    if len(wrong) > DEMO_WRONG_SHOWN:
        lines.append(f"  … and {len(wrong) - DEMO_WRONG_SHOWN} more (the run's report lists them all)")
    lines += [
        "Next steps of the tour (README.md):",
        "  .venv/bin/python manage.py createsuperuser     # an admin login",
        "  .venv/bin/python manage.py runserver           # daphne on 127.0.0.1:8000",
        f"  then open http://127.0.0.1:8000/admin/evaluation/run/{run.pk}/report/ (this run's report)"
        " and http://127.0.0.1:8000/ (the chat)",
    ]
    return lines
