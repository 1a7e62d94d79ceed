"""Opening a run, ``run_eval``'s and ``run_experiment``'s first half: check
what can be checked before anything is written (``eval_check``), then start or
resume the run under this process's lease and plan it (``run_open``)
(docs/architecture.md#evaluation-semantics).

Nothing here drives an example: ``evaluation.run.evaluate`` drives one open
run, ``evaluation.experiments.drive`` several at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.providers.local import LocalGGUFProvider
from agentlab.agent.types import LLMProvider
from common.errors import BadInput, StateConflict
from common.version import code_version
from evaluation.datasets.conversation_spec import SIMULATED_KEY, TURNS_KEY
from evaluation.datasets.services import dataset_fallback_task_types, dataset_resolve_ref, fallback_note
from evaluation.datasets.subsets import subset_check
from evaluation.datasets.versions import DatasetRef, examples_at
from evaluation.judge.provider import judge_check, judge_provider
from evaluation.models import Dataset, Experiment, Run
from evaluation.run.check_gate import check_gate_precheck
from evaluation.run.extensions import extensions_resume, extensions_snapshot, mcp_preflight, run_extensions
from evaluation.run.lifecycle import RunLease, run_lease_tag, run_start
from evaluation.run.notes import plan_line, review_resolved
from evaluation.run.plan import PlannedExample, run_plan
from evaluation.run.request import EvalRequest
from evaluation.run.scorer_check import scorers_snapshot
from evaluation.run.simulator import UserSimulator
from turns.llm import get_provider
from turns.llm_cache import cached_provider


@dataclass(frozen=True)
class CheckedEval:
    """A request whose provider is built (a local model loaded) and whose
    dataset is resolved, nothing written yet (``eval_check``)."""

    request: EvalRequest
    provider: LLMProvider
    ref: DatasetRef
    #: the kinds of conversation example the dataset holds (``turns``, ``simulated``)
    conversations: frozenset[str] = frozenset()


def eval_check(request: EvalRequest) -> CheckedEval:
    """Build the provider (loading a local GGUF model: a file that is not a
    GGUF would otherwise fail every example), check the judge model and
    resolve the dataset and check its subset (``--split``, ``--tag``: an
    unknown one is ``BadInput``) — before any run is written. Raises ``ValueError``
    for ``celery`` with the local model, and ``BadInput`` /
    ``DatasetFormatError`` / ``LocalModelUnavailable`` from the steps, and
    ``StateConflict`` for a run id taken on another dataset (``run_dataset_precheck``)."""
    run_dataset_precheck(request)
    provider = get_provider(
        model=request.model, price=request.price, base_url=request.base_url, api_key=request.api_key
    )
    if request.celery and provider.name == "local":
        raise ValueError(
            "--celery needs an OpenAI-compatible endpoint (AGENTLAB_LLM_BASE_URL): "
            "each worker would load its own copy of the local model"
        )
    if isinstance(provider, LocalGGUFProvider):
        provider.load()
    provider = cached_provider(provider, request.cache)
    judge_check(judge_model=request.judge_model, run_model=request.model)
    ref = dataset_resolve_ref(name_or_path=request.dataset)
    if request.split is not None or request.tags:
        subset_check(ref.dataset, ref.number, split=request.split, tags=request.tags)
    kinds = conversation_kinds(ref)
    if kinds and request.celery:
        raise BadInput(
            f"dataset {ref.dataset.name!r} holds conversation examples, which run_eval drives in "
            "process, turn after turn: run it without --celery"
        )
    if "simulated" in kinds:
        judge_check(judge_model=request.user_simulator.get("model"), run_model=request.model)
    return CheckedEval(request=request, provider=provider, ref=ref, conversations=kinds)


def run_dataset_precheck(request: EvalRequest) -> None:
    """A run id that exists on another dataset than the one asked for is a
    ``StateConflict`` before the dataset is resolved — resolving a ``.jsonl``
    path registers it, and a refused run must write nothing. The name a
    request asks for: ``NAME`` of ``NAME@VERSION``, a ``.jsonl`` file's stem."""
    run = (
        Run.objects.filter(run_id=request.run_id).select_related("dataset").first()
        if request.run_id
        else None
    )
    if run is None:
        return
    path = Path(request.dataset)
    wanted = path.stem if path.suffix.lower() == ".jsonl" else request.dataset.rsplit("@", 1)[0]
    if run.dataset.name != wanted:
        raise StateConflict(f"run {request.run_id!r} exists on dataset {run.dataset.name!r}, not {wanted!r}")


def conversation_kinds(ref: DatasetRef) -> frozenset[str]:
    """Which kinds of conversation example (``turns``, ``simulated``) the
    dataset's version holds: two indexed ``EXISTS`` queries on the metadata."""
    rows = examples_at(ref.dataset.pk, ref.number)
    kinds = {
        kind
        for kind, key in (("turns", TURNS_KEY), ("simulated", SIMULATED_KEY))
        if rows.filter(**{"metadata__has_key": key}).exists()
    }
    return frozenset(kinds)


def user_simulator(checked: CheckedEval) -> UserSimulator | None:
    """The run's simulated user when its dataset has simulated-user examples
    (``--user-model``, else the run's model; ``None`` otherwise)."""
    if "simulated" not in checked.conversations:
        return None
    options = checked.request.user_simulator
    provider = judge_provider(judge_model=options.get("model"), run_model=checked.request.model)
    return UserSimulator(
        provider=provider, temperature=float(options["temperature"]), seed=int(options["seed"])
    )


@dataclass
class OpenRun:
    """A started (or resumed) and planned run, leased to this process:
    ``request`` with ``review`` resolved, the ``provider`` and
    ``extensions`` it drives with, its ``planned`` examples and ``lease``
    (stop it once the run is finished or released)."""

    run: Run
    dataset: Dataset
    request: EvalRequest
    provider: LLMProvider
    extensions: RunExtensions
    planned: list[PlannedExample]
    lease: RunLease
    #: the simulated user of its simulated-user examples (``None``: it has none)
    simulator: UserSimulator | None = None


def run_open(
    checked: CheckedEval,
    *,
    run_id: str,
    note: Callable[[str], None],
    experiment: Experiment | None = None,
    variant: dict[str, Any] | None = None,
) -> OpenRun:
    """Start or resume ``run_id`` (``run_start``) under this process's lease
    (renewed by ``RunLease`` until stopped), plan it (``run_plan``) and
    ``note`` the plan line and its warnings. ``experiment`` and ``variant``
    (``{"name", "options"}``): what the run is a variant of; the variant goes
    into the run's config snapshot. Raises ``BadInput`` / ``StateConflict``
    from ``run_start`` and the extensions' checks; the lease is stopped then."""
    request, provider, ref = checked.request, checked.provider, checked.ref
    dataset = ref.dataset  # on the version asked for (a new run), else the run's own
    request, extensions, config, review_default = _setup(checked, run_id=run_id)
    if variant is not None:
        config["variant"] = variant
    driver = run_lease_tag()
    run, resumed = run_start(
        run_id=run_id,
        dataset=ref.dataset,
        config=config,
        driver=driver,
        turns_on_workers=request.celery,
        dataset_version=ref.version,
        experiment=experiment,
        variant=variant["name"] if variant else "",
    )
    lease = RunLease(run_pk=run.pk, driver=driver).start()
    try:
        planned, skipped = run_plan(
            run=run,
            limit=request.limit,
            max_steps=request.max_steps,
            model=provider.model,
            retry_errors=request.retry_errors,
            max_output_tokens=request.max_output_tokens,
            epochs=int(config["epochs"]),
            live_ok=request.celery,
        )
    except BaseException:
        lease.stop()
        raise
    note(
        plan_line(
            run,
            dataset,
            provider,
            review=bool(request.review),
            planned=len(planned),
            skipped=skipped,
            resumed=resumed,
            review_default=review_default,
        )
    )
    for line in _warnings(dataset):
        note(line)
    return OpenRun(
        run=run,
        dataset=dataset,
        request=request,
        provider=provider,
        extensions=extensions,
        planned=planned,
        lease=lease,
        simulator=user_simulator(checked),
    )


def _setup(checked: CheckedEval, *, run_id: str) -> tuple[EvalRequest, RunExtensions, dict[str, Any], bool]:
    """What run ``run_id`` drives with: the request with ``review`` resolved,
    its extensions (a resumed run's own ``--plugin`` names and ``--mcp``
    servers, checked; MCP servers started in process), its config snapshot,
    and whether review is the provider's default."""
    request, provider, dataset = checked.request, checked.provider, checked.ref.dataset
    extensions = run_extensions(dataset=dataset, plugins=request.plugins, mcp_servers=request.mcp_servers)
    existing = Run.objects.filter(run_id=run_id).values_list("config", flat=True).first()
    if existing is not None:
        extensions = extensions_resume(extensions, run_id=run_id, config=existing)
    if not request.celery:  # on Celery the workers start their own servers
        mcp_preflight(extensions.mcp_servers)
    # a resume without --epochs keeps the run's; another number is refused by run_start
    epochs = request.epochs or int((existing or {}).get("epochs") or 1)
    request, review_default = review_resolved(request, existing=existing, provider=provider)
    config = {
        **run_config(request, provider, dataset),
        **extensions_snapshot(extensions, dataset=dataset),
        **scorers_snapshot(dataset),
        "epochs": epochs,
        "judge_model": request.judge_model,
        # only for a dataset with simulated users, so other runs' configs are what they were
        **({"user_simulator": request.user_simulator} if "simulated" in checked.conversations else {}),
        **_subset_config(request, existing),
    }
    check_gate_precheck(request.fail_on_checks, [p["name"] for p in config["plugins"]])
    return request, extensions, config, review_default


def _subset_config(request: EvalRequest, existing: dict[str, Any] | None) -> dict[str, Any]:
    """The run's ``split`` and ``tags`` (only when set, so a whole-dataset
    run's config is what it was before subsets): the request's, else — a
    resume without them — the run's own; ``run_start`` refuses another."""
    split = request.split or (existing or {}).get("split")
    tags = list(request.tags) or list((existing or {}).get("tags") or [])
    return {**({"split": split} if split else {}), **({"tags": tags} if tags else {})}


def _warnings(dataset: Dataset) -> list[str]:
    """What the plan line is followed by: the task types scored by a
    fallback scorer (``evaluation.run.on_workers.queue_warning`` adds the
    Celery queue that no worker reads, once the run is open)."""
    lines = [fallback_note(dataset_fallback_task_types(dataset=dataset))]
    return [line for line in lines if line]


def run_config(request: EvalRequest, provider: LLMProvider, dataset: Dataset) -> dict[str, Any]:
    """The run's config snapshot (docs/architecture.md#the-data-model);
    ``api_key_env`` and ``agent_options`` only when set, so a plain run's
    config is what it was before experiments."""
    return {
        "provider": provider.name,
        "model": provider.model,
        # the endpoint the predictions are made with: it travels with the run
        # to the Celery workers (the key does not: each process has its own)
        "base_url": getattr(provider, "base_url", None),
        **({"api_key_env": request.api_key_env} if request.api_key_env else {}),
        **({"agent_options": request.agent_options} if request.agent_options else {}),
        **({"sample": {"n": request.sample, "seed": request.seed}} if request.sample else {}),
        "max_steps": request.max_steps,
        "concurrency": request.concurrency,
        "limit": request.limit,
        "scorer": "per example, else per dataset, else per task type",
        "dataset": dataset.name,
        "code_version": code_version(),
        "review": request.review,
        "celery_queue": request.queue or None,
        "max_output_tokens": request.max_output_tokens,
        # None: the provider's own cost, else the genai-prices table, else unknown
        "price": request.price.to_dict() if request.price is not None else None,
        # only when set, so an uncached run's config is what it was before the cache
        **({"cache": request.cache.to_dict()} if request.cache is not None else {}),
    }
