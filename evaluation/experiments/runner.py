"""``run_experiment``'s body: every variant of an experiment file one run,
all driven at once by ``run_eval``'s own services (docs/architecture.md#experiments).

Order, so that bad input writes nothing: the file is read and checked
(``experiment_spec``), each variant's options become a checked
``EvalRequest`` (``eval_request``), the stored experiment and its runs are
checked against the file (a changed variant, a changed dataset, a run id
taken by another run are refused), every provider is built and the dataset
resolved (``eval_check``). Only then is the ``Experiment`` row written and
each unfinished variant's run started or resumed (``run_open``); the runs are
driven together (``evaluation.run.evaluate.drive_and_finish``: one
concurrency budget shared fairly, or one in-flight cap on Celery) and finished, and with a ``baseline`` each
other variant is compared with it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from common.errors import BadInput, StateConflict
from evaluation.compare.gate import BaselineOutcome, baseline_compare
from evaluation.experiments.experiment_file import ExperimentSpec, VariantSpec
from evaluation.experiments.stopping import StopRule, drive_in_rounds
from evaluation.models import Experiment, Run, RunStatus
from evaluation.run.check_gate import check_gate_failure, parse_fail_on_check
from evaluation.run.evaluate import drive_and_finish
from evaluation.run.exits import outage_as_run_outage, run_failure
from evaluation.run.extensions import mcp_preflight
from evaluation.run.lifecycle import run_regression_record
from evaluation.run.on_workers import broker_precheck, queue_warning
from evaluation.run.opening import CheckedEval, OpenRun, eval_check, run_open
from evaluation.run.progress import ProgressFactory
from evaluation.run.request import BaselineRequest, Endpoint, EvalRequest, cache_policy, eval_request

#: Shared keys passed to ``eval_request`` under the same name.
_SHARED_AS_IS = (
    "limit",
    "concurrency",
    "epochs",
    "max_steps",
    "review",
    "judge_model",
    "user_model",
    "user_temperature",
    "user_seed",
    "celery",
    "queue",
    "max_in_flight",
    "price_in",
    "price_out",
    "fail_under",
    "fail_on_check",
)
#: Variant keys passed to ``eval_request`` under the same name (they win over the shared ones).
_VARIANT_AS_IS = ("model", "review", "max_steps", "max_output_tokens", "price_in", "price_out")


@dataclass
class VariantOutcome:
    """A variant after the experiment: its ``run`` (finished, or ``None``
    when it could not start), whether it was ``done`` before this
    invocation (nothing driven), its ``gate_failure`` and its comparison with
    the baseline variant."""

    variant: VariantSpec
    run: Run | None
    done: bool = False
    gate_failure: str | None = None
    baseline: BaselineOutcome | None = None


@dataclass
class ExperimentResult:
    """What ``run_experiment`` did: the ``experiment`` row and one
    ``VariantOutcome`` per variant of the file, in its order."""

    experiment: Experiment
    variants: list[VariantOutcome] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """Why the experiment fails its gates: ``fail_under`` per variant, and
        with ``fail_on_regression`` a significant regression against the baseline."""
        found = []
        for outcome in self.variants:
            for failure in (
                outcome.gate_failure,
                outcome.baseline.gate_failure if outcome.baseline else None,
            ):
                if failure:
                    found.append(f"variant {outcome.variant.name!r}: {failure}")
        return found


def variant_request(
    spec: ExperimentSpec, variant: VariantSpec, *, dataset: str, retry_errors: bool = False
) -> EvalRequest:
    """``variant``'s checked ``EvalRequest``: the shared options, the
    variant's over them (plugins: the shared ones, then the variant's), its
    run id, on ``dataset``. Raises ``BadInput`` naming the file and variant."""
    shared, options = spec.shared, variant.options
    # review None: the provider's default (off for the embedded model), as run_eval without the flag
    values: dict[str, Any] = {"review": None} | {key: shared[key] for key in _SHARED_AS_IS if key in shared}
    values |= {key: options[key] for key in _VARIANT_AS_IS if key in options}
    plugins = [*shared.get("plugins", []), *options.get("plugins", [])]
    endpoint = None
    if "base_url" in options:
        endpoint = Endpoint(
            base_url=options["base_url"], api_key=variant.api_key, api_key_env=options.get("api_key_env")
        )
    try:
        return eval_request(
            dataset=dataset,
            run_id=spec.run_id(variant),
            retry_errors=retry_errors,
            plugins=plugins,
            mcp=options.get("mcp", []),
            endpoint=endpoint,
            system_prompt=options.get("system_prompt"),
            temperature=options.get("temperature"),
            split=shared.get("split"),
            tags=shared.get("tags", ()),
            cache=cache_policy(
                cache=bool(shared.get("cache")),
                expiry=shared.get("cache_expiry"),
                sampled=bool(shared.get("cache_sampled")),
            ),
            **values,
        )
    except (ValueError, BadInput) as exc:
        raise BadInput(_option_error(str(exc), spec, variant)) from None


def _option_error(message: str, spec: ExperimentSpec, variant: VariantSpec) -> str:
    """``eval_request``'s ``message`` said of the file: its ``--flag`` as the
    file's key, under the variant when the variant sets that key."""
    words = re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), message)
    words = words.replace("plugin ", "plugins: ", 1) if words.startswith("plugin ") else words
    key = re.match(r"[a-z_]+", words)
    if key and key.group() in variant.options:
        return f"{spec.path}: variant {variant.name!r}: {words}"
    return f"{spec.path}: {words}"


def experiment_check(spec: ExperimentSpec) -> Experiment | None:
    """The stored experiment of ``spec`` (``None``: a new one), checked
    against the file; raises ``StateConflict`` for another experiment under
    the same run-id prefix, a changed dataset, a variant whose options
    changed under the same name, a variant's run id taken by a run that is
    not that variant's. Writes nothing."""
    experiment = Experiment.objects.select_related("dataset").filter(name=spec.name).first()
    clash = Experiment.objects.filter(slug=spec.slug).exclude(name=spec.name).first()
    if clash is not None:
        raise StateConflict(
            f"{spec.path}: name: experiment {clash.name!r} already makes run ids starting {spec.slug!r}; "
            "give this one another name"
        )
    if experiment is not None:
        _shared_check(spec, experiment)
    stored = {} if experiment is None else {v["name"]: v for v in experiment.spec.get("variants", [])}
    for variant in spec.variants:
        run = Run.objects.filter(run_id=spec.run_id(variant)).first()
        if run is None:
            continue
        if experiment is None or run.experiment_id != experiment.pk or run.variant != variant.name:
            raise StateConflict(
                f"{spec.path}: variant {variant.name!r}: its run id {run.run_id!r} is taken by another run; "
                "rename the variant or the experiment"
            )
        before = (run.config or {}).get("variant", {}).get("options", stored.get(variant.name))
        if before != variant.options:
            raise StateConflict(
                f"{spec.path}: variant {variant.name!r}: {_changed(before or {}, variant.options)}"
            )
    return experiment


#: Shared keys that may change between invocations: how the variants are run
#: and gated, not what is measured (``limit`` drives more examples, as a
#: ``run_eval`` resume with a larger ``--limit`` does).
FREE_SHARED_KEYS = frozenset(
    {"limit", "concurrency", "celery", "queue", "max_in_flight", "fail_under", "fail_on_check"}
    | {"stop_when_decided", "margin", "batch_size"}  # when it stops, not what is measured
)


def _shared_check(spec: ExperimentSpec, experiment: Experiment) -> None:
    """Refuse a shared option that changed since the experiment's last run
    and changes what is measured (``FREE_SHARED_KEYS`` aside)."""
    before = dict((experiment.spec or {}).get("shared") or {})
    after = spec.shared
    keys = sorted(k for k in {*before, *after} if k not in FREE_SHARED_KEYS and before.get(k) != after.get(k))
    if keys:
        changes = "; ".join(f"{k} {before.get(k, '(unset)')!r} → {after.get(k, '(unset)')!r}" for k in keys)
        raise StateConflict(
            f"{spec.path}: {keys[0]}: the shared options changed since the experiment's runs ({changes}); "
            "its variants measured the old ones: give the changed experiment a new name"
        )


def _changed(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What changed in a variant's options, in words."""
    keys = sorted(k for k in {*before, *after} if before.get(k) != after.get(k) and k != "system_prompt_file")
    parts = [f"{key} {before.get(key, '(unset)')!r} → {after.get(key, '(unset)')!r}" for key in keys]
    if "system_prompt" in keys:
        parts = [p for p in parts if not p.startswith("system_prompt ")] + ["the system prompt's text"]
    return (
        "its options changed since its run ("
        + "; ".join(parts)
        + "); a run measures one setup: give the changed variant a new name"
    )


def _dataset_for(spec: ExperimentSpec, experiment: Experiment | None) -> str:
    """What the variants run on: the file's dataset for a new experiment,
    else the experiment's dataset at its version (refusing another one)."""
    if experiment is None:
        return spec.dataset
    pinned = f"{experiment.dataset.name}@{experiment.dataset_version}"
    if spec.dataset == (experiment.spec or {}).get("dataset"):
        return pinned  # as the file said it before (a .jsonl path too): the experiment's version
    name, _, version = spec.dataset.partition("@")
    if spec.dataset not in (experiment.dataset.name, pinned) and name != experiment.dataset.name:
        raise StateConflict(
            f"{spec.path}: dataset: experiment {spec.name!r} runs on {pinned}, not {spec.dataset!r}; "
            "another dataset is another experiment (give it another name)"
        )
    if version and version != str(experiment.dataset_version):
        raise StateConflict(
            f"{spec.path}: dataset: experiment {spec.name!r} runs on {pinned}; its variants compare "
            f"only on one version (give an experiment on @{version} another name)"
        )
    return pinned


@dataclass
class ExperimentPlan:
    """The checked experiment: its stored row (``None``: new), and per
    variant its check, or ``None`` when its run is already finished."""

    experiment: Experiment | None
    checks: list[tuple[VariantSpec, CheckedEval | None]]


def experiment_plan(spec: ExperimentSpec, *, retry_errors: bool = False) -> ExperimentPlan:
    """Every check of the module docstring, nothing written; raises
    ``BadInput`` / ``StateConflict`` / ``DatasetFormatError`` /
    ``LocalModelUnavailable`` naming the file and the variant."""
    experiment = experiment_check(spec)
    dataset = _dataset_for(spec, experiment)
    requests = [
        (v, variant_request(spec, v, dataset=dataset, retry_errors=retry_errors)) for v in spec.variants
    ]
    checks: list[tuple[VariantSpec, CheckedEval | None]] = []
    for variant, request in requests:
        if _finished(request):
            checks.append((variant, None))
            continue
        try:
            checked = eval_check(request)
            if not request.celery:  # an MCP server that does not start is bad input, before any write
                mcp_preflight(request.mcp_servers)
            checks.append((variant, checked))
        except (BadInput, ValueError) as exc:
            if str(exc).startswith(("--split", "--tag")):  # the shared subset: said as the file's key
                raise BadInput(_option_error(str(exc), spec, variant)) from None
            where = "dataset" if "dataset" in str(exc) else f"variant {variant.name!r}"
            raise BadInput(f"{spec.path}: {where}: {exc}") from None
    return ExperimentPlan(experiment=experiment, checks=checks)


def _finished(request: EvalRequest) -> bool:
    """Whether the request's run finished successfully on as many examples
    and epochs as asked: nothing is left to drive."""
    run = Run.objects.filter(run_id=request.run_id, status=RunStatus.SUCCESS).first()
    if run is None:
        return False
    if request.retry_errors and (
        run.predictions.exclude(error="").exists() or run.predictions.filter(stop_reason="cancelled").exists()
    ):
        return False  # --retry-errors: its errored examples run again
    config = run.config or {}
    return config.get("limit") == request.limit and (request.epochs or 1) == int(config.get("epochs") or 1)


def _experiment_save(spec: ExperimentSpec, plan: ExperimentPlan) -> Experiment:
    """Create or update the ``Experiment`` row from the file."""
    first = next((check for _, check in plan.checks if check is not None), None)
    try:
        return _experiment_write(spec, plan, first)
    except IntegrityError:
        if plan.experiment is not None:
            raise
        raise StateConflict(
            f"{spec.path}: experiment {spec.name!r} was just created by another process; "
            "wait for it to finish, then run the file again to resume"
        ) from None


def _experiment_write(spec: ExperimentSpec, plan: ExperimentPlan, first: CheckedEval | None) -> Experiment:
    """``_experiment_save``'s write, in one transaction."""
    with transaction.atomic():
        experiment = plan.experiment
        if experiment is None:
            if first is None:  # every run finished and no experiment row: cannot happen after a check
                raise StateConflict(f"{spec.path}: experiment {spec.name!r} has no stored row")
            ref = first.ref
            experiment = Experiment(
                name=spec.name,
                slug=spec.slug,
                dataset=ref.dataset,
                dataset_version=ref.version or ref.dataset.version,
            )
        stored = {v["name"]: v for v in (experiment.spec or {}).get("variants", [])}
        document = spec.to_dict()
        # a variant dropped from the file keeps its run and its place on the leaderboard
        kept = [v for name, v in stored.items() if name not in {v.name for v in spec.variants}]
        document["variants"] = [*document["variants"], *kept]
        experiment.spec, experiment.source = document, spec.path
        experiment.baseline, experiment.alpha = spec.baseline, spec.alpha
        experiment.save()
    return experiment


def run_experiment(
    spec: ExperimentSpec,
    *,
    note: Callable[[str], None],
    progress: ProgressFactory,
    fail_on_regression: bool = False,
    retry_errors: bool = False,
    stop: StopRule | None = None,
) -> ExperimentResult:
    """Run every unfinished variant of ``spec`` (see the module docstring)
    and return the outcome per variant. A variant already finished is not
    driven again. With ``spec.baseline``, each other finished variant is
    compared with it (exact McNemar, Holm across task types, as
    ``run_eval --baseline``) and the regression flag stored on its run;
    ``fail_on_regression`` makes a significant regression a gate failure;
    ``retry_errors`` runs the errored examples of every variant again
    (``run_eval --retry-errors``), a finished variant's included.
    ``stop`` (``stopping.stop_rule``): drive in rounds and stop once the
    top group is decided (``stopping.drive_in_rounds``).

    The open runs are driven and finished together by
    ``evaluation.run.evaluate.drive_and_finish``, as ``run_eval`` drives one.

    Raises what ``experiment_plan`` raises before anything is written;
    ``RunInterrupted`` (named by the experiment) on Ctrl-C, ``RunOutage``
    when the database or broker fails — the same command resumes.
    """
    if fail_on_regression and not spec.baseline:
        raise BadInput(f'{spec.path}: --fail-on-regression needs baseline = "<variant>" in the file')
    plan = experiment_plan(spec, retry_errors=retry_errors)
    todo = [(variant, check) for variant, check in plan.checks if check is not None]
    if todo and todo[0][1] is not None and todo[0][1].request.celery:
        broker_precheck(spec.name)
    with outage_as_run_outage(spec.name):
        experiment = _experiment_save(spec, plan)
        if stop is None:
            outcomes = _drive(spec, experiment, plan, note=note, progress=progress)
        else:
            outcomes = drive_in_rounds(
                spec,
                experiment,
                stop,
                drive_once=lambda at: _drive(
                    at,
                    experiment,
                    experiment_plan(at, retry_errors=retry_errors),
                    note=note,
                    progress=progress,
                ),
                note=note,
            )
    result = ExperimentResult(experiment=experiment, variants=outcomes)
    if spec.baseline:
        _compare_with_baseline(spec, result, fail_on_regression=fail_on_regression)
    return result


def _drive(
    spec: ExperimentSpec,
    experiment: Experiment,
    plan: ExperimentPlan,
    *,
    note: Callable[[str], None],
    progress: ProgressFactory,
) -> list[VariantOutcome]:
    """Open every unfinished variant's run, drive them together, finish them."""
    outcomes: list[VariantOutcome] = []
    opens: list[OpenRun] = []
    try:
        for variant, check in plan.checks:
            if check is None:
                run = Run.objects.get(run_id=spec.run_id(variant))
                note(f"variant {variant.name}: run {shlex.quote(run.run_id)} is finished; nothing to do")
                outcomes.append(VariantOutcome(variant=variant, run=run, done=True))
                continue
            opened = run_open(
                check,
                run_id=spec.run_id(variant),
                note=note,
                experiment=experiment,
                variant={"name": variant.name, "options": variant.options},
            )
            if opened.request.celery:
                warning = queue_warning(queue=opened.request.queue, planned=len(opened.planned))
                if warning:
                    note(warning)
            opens.append(opened)
            outcomes.append(VariantOutcome(variant=variant, run=opened.run))
        concurrency = int(spec.shared.get("concurrency", 4))
        finished = iter(drive_and_finish(opens, progress=progress, concurrency=concurrency, name=spec.name))
    finally:
        for opened in opens:
            opened.lease.stop()
    fail_under = spec.shared.get("fail_under")
    for outcome in outcomes:
        if not outcome.done:
            outcome.run = next(finished)
        if outcome.run is not None:
            outcome.gate_failure = run_failure(outcome.run, fail_under) or check_gate_failure(
                outcome.run.metrics, parse_fail_on_check(spec.shared.get("fail_on_check") or ())
            )
    return outcomes


def _compare_with_baseline(
    spec: ExperimentSpec, result: ExperimentResult, *, fail_on_regression: bool
) -> None:
    """Compare each finished variant with the baseline variant's run and store the flag."""
    base = next((o.run for o in result.variants if o.variant.name == spec.baseline), None)
    if base is None or base.status != RunStatus.SUCCESS:
        return
    request = BaselineRequest(baseline=base.run_id, fail_on_regression=fail_on_regression, alpha=spec.alpha)
    for outcome in result.variants:
        run = outcome.run
        if outcome.variant.name == spec.baseline or run is None or run.status != RunStatus.SUCCESS:
            continue
        outcome.baseline = baseline_compare(run=run, request=request)
        outcome.run = run_regression_record(run=run, baseline=base, regressions=outcome.baseline.regressions)
