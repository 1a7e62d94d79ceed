"""``run_eval --baseline RUN_ID|previous [--fail-on-regression] [--alpha A]``:
compare the finished run with a baseline and gate on significant regressions.

``manage.py run_eval`` checks the options before the run
(:func:`baseline_request`, :func:`baseline_precheck`: an unknown baseline, or
one on another dataset, is exit 2 before anything is driven) and calls
:func:`baseline_compare` after it. ``previous`` is the latest finished run
on the same dataset with the same config apart from the model and code
version (``evaluation.compare.selectors.run_previous``); when there is none the
comparison is skipped with a note, and the gate passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.errors import BadInput
from evaluation.compare.pairing import regressions
from evaluation.compare.selectors import run_previous
from evaluation.compare.services import comparison_detectable, run_compare
from evaluation.compare.shapes import Comparison
from evaluation.datasets.versions import dataset_ref
from evaluation.models import Dataset, Run, RunStatus
from evaluation.run.request import BaselineRequest
from evaluation.selectors import run_get

#: ``--baseline`` value meaning "the previous comparable run".
PREVIOUS = "previous"


@dataclass(frozen=True)
class BaselineOutcome:
    """The comparison with the baseline (``None`` when skipped, with
    ``note`` saying why), the baseline's run id, and ``regressions``: the
    significant regressions found (``evaluation.compare.pairing.regressions``);
    ``gate_failure`` is the message of a failed gate, or ``None``."""

    comparison: Comparison | None
    baseline_run_id: str | None
    note: str | None
    regressions: list[str]
    gate_failure: str | None


def baseline_precheck(request: BaselineRequest, *, dataset: str, run_id: str | None = None) -> None:
    """Before the run: a ``--baseline RUN_ID`` must not be the run itself
    (``run_id``, the ``--run-id`` given), must exist (``NotFound``), have
    finished with status ``success`` and be on the dataset ``run_eval`` was given (a registered name, or a
    ``.jsonl`` path, registered under its file's stem) — ``BadInput``
    otherwise. Nothing to check for ``previous`` or no baseline."""
    if request.baseline is None or request.baseline == PREVIOUS:
        return
    if request.baseline == run_id:
        raise BadInput(
            f"--baseline {request.baseline} is the run itself (--run-id): a run cannot be compared with "
            "itself; name an earlier run, or --baseline previous"
        )
    baseline = run_get(run_id=request.baseline)
    if baseline.status != RunStatus.SUCCESS:
        raise BadInput(
            f"--baseline {baseline.run_id} ended {baseline.status}: a baseline must be a run that "
            "finished (status success); its examples that did not run would count as wrong"
        )
    # the name run_eval will register or find (evaluation.datasets.services.dataset_resolve_ref)
    name = dataset
    if not Dataset.objects.filter(name=dataset).exists():
        path, ref = Path(dataset), None
        if path.suffix != ".jsonl" and not path.is_file():
            ref = dataset_ref(dataset)  # NAME@VERSION
        name = ref[0] if ref else path.stem
    if baseline.dataset.name != name:
        raise BadInput(
            f"--baseline {baseline.run_id} is a run on dataset {baseline.dataset.name!r}, not {name!r}: "
            "a comparison pairs the same examples, so the baseline must be on the same dataset"
        )


def baseline_compare(*, run: Run, request: BaselineRequest) -> BaselineOutcome:
    """Compare the finished ``run`` with its baseline and apply the gate.

    Raises ``NotFound`` for an unknown baseline run id and ``BadInput`` for a
    baseline on another dataset (``run_compare``)."""
    if request.baseline is None:
        return BaselineOutcome(None, None, None, [], None)
    if request.baseline == PREVIOUS:
        baseline = run_previous(run=run)
        if baseline is None:
            note = (
                f"--baseline previous: no earlier finished run on dataset {run.dataset.name!r} with the "
                "same config apart from model, provider, code version (plugins' versions included) "
                "and how it was executed (concurrency, price); comparison skipped"
            )
            return BaselineOutcome(None, None, note, [], None)
    else:
        baseline = run_get(run_id=request.baseline)
    comparison = run_compare(base=baseline, candidate=run)
    # what the gate could have caught, at the gate's own alpha
    comparison["detectable"] = comparison_detectable(comparison, alpha=request.alpha)
    found = regressions(comparison, alpha=request.alpha)
    failure = None
    if request.fail_on_regression and found:
        failure = f"significant regression against baseline {baseline.run_id}: " + "; ".join(found)
    return BaselineOutcome(comparison, baseline.run_id, None, found, failure)
