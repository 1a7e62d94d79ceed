"""``run_eval``'s body, a service over the others: resolve the dataset, start
(or resume) the run, plan it, drive its examples, finish it (DESIGN.md §10).

It sits beside ``evaluation.services`` rather than in it because it drives
(``evaluation.runner``, ``evaluation.parallel``), and those import the
services: imports point down, never round.

``manage.py run_eval`` parses its options into an ``EvalRequest``
(``eval_request``), checks the database, calls ``run_eval`` and maps the
``EvalResult`` and the errors to exit codes; nothing here prints or exits.
Progress goes to the caller through ``note`` (one line of text for the user)
and ``progress`` (a bar per run, e.g. ``tqdm``).
"""

from __future__ import annotations

import asyncio
import math
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.mcp.config import MCPServerConfig, parse_server_option
from agentlab.agent.plugins import PluginError, load_plugin
from agentlab.agent.pricing import Price
from agentlab.agent.providers.local import LocalGGUFProvider
from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads, connections_retire_broken, is_connection_error
from common.errors import BadInput
from common.version import code_version
from turns.llm import get_provider

from .extensions import extensions_resume, extensions_snapshot, run_extensions
from .judging import judge_check, judge_pass
from .models import Dataset, Run, RunStatus
from .parallel import drive_in_processes
from .run_exits import RunOutage
from .runner import DatabaseOutage, drive_examples
from .selectors import dataset_fallback_task_types, fallback_note
from .services.datasets import dataset_resolve
from .services.plan import PlannedExample, run_plan
from .services.runs import RunLease, run_finish, run_id_check, run_lease_tag, run_start

#: Most worker processes ``--workers`` may ask for.
MAX_WORKERS = 16


@dataclass(frozen=True)
class EvalRequest:
    """What ``run_eval`` was asked to do, checked (``eval_request``).

    ``dataset``: a registered name, ``demo`` or a ``.jsonl`` path;
    ``run_id``: ``None`` for a new one; ``limit``: only the first N examples
    (``None``: all); ``concurrency``: examples driven at once; ``max_steps``:
    agent steps per example; ``model``: a model name or GGUF path (``None``:
    the configured one); ``fail_under``: the accuracy (0..1) below which the
    run fails its quality gate (``None``: no gate); ``review``,
    ``retry_errors``, ``workers``: as the command's options. ``plugins``:
    the ``--plugin`` names (entry-point plugins the run switches on);
    ``mcp_servers``: the ``--mcp`` servers;
    ``max_output_tokens``: the output-token limit of one LLM call; ``price``:
    the per-run price override (``None``: the price table, else unknown).
    ``epochs``: how many times each example is run (independent turns;
    ``None``: the resumed run's, else 1); ``judge_model``: the grading model
    of examples scored by the LLM judge (``None``: the run's model).
    """

    dataset: str
    run_id: str | None
    limit: int | None
    concurrency: int
    max_steps: int
    model: str | None
    fail_under: float | None
    review: bool = True
    retry_errors: bool = False
    workers: int = 1
    plugins: tuple[str, ...] = ()
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    max_output_tokens: int = 512
    price: Price | None = None
    epochs: int | None = None
    judge_model: str | None = None


#: Most epochs ``--epochs`` may ask for.
MAX_EPOCHS = 100


def eval_request(
    *,
    dataset: str,
    run_id: str | None = None,
    limit: int | None = None,
    concurrency: int = 4,
    max_steps: int | None = None,
    model: str | None = None,
    fail_under: float | None = None,
    review: bool = True,
    retry_errors: bool = False,
    workers: int = 1,
    plugins: Sequence[str] = (),
    mcp: Sequence[str] = (),
    max_output_tokens: int | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
    epochs: int | None = None,
    judge_model: str | None = None,
) -> EvalRequest:
    """An ``EvalRequest`` from the command's option values; ``max_steps``
    ``None`` takes ``AGENTLAB_MAX_STEPS``, ``max_output_tokens`` ``None``
    ``AGENTLAB_MAX_OUTPUT_TOKENS``; ``price_in``/``price_out`` are US dollars
    per million tokens, both or neither.

    Raises ``ValueError`` (``BadInput`` for the run id) naming the option:
    ``--limit`` below 1, ``--concurrency`` outside 1..256, ``--max-steps`` (or
    ``AGENTLAB_MAX_STEPS``) below 1, ``--max-output-tokens`` below 1,
    ``--workers`` outside 1..min(concurrency, 16), ``--fail-under`` outside
    0..1, only one of ``--price-in``/``--price-out`` or a negative one, a bad
    run id, a ``--plugin`` that is not installed, an ``--mcp`` that is not
    ``NAME=URL``, ``NAME=COMMAND`` or ``NAME={JSON}`` (or names a server twice),
    ``--epochs`` outside 1..``MAX_EPOCHS``.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    if not 1 <= concurrency <= 256:
        raise ValueError(f"--concurrency must be between 1 and 256, got {concurrency}")
    # name where the value came from: the user may never have passed the flag
    max_steps_from = "--max-steps" if max_steps is not None else "AGENTLAB_MAX_STEPS"
    max_steps = max_steps if max_steps is not None else settings.AGENTLAB_MAX_STEPS
    if max_steps < 1:
        raise ValueError(f"{max_steps_from} must be at least 1, got {max_steps}")
    most = min(concurrency, MAX_WORKERS)
    if not 1 <= workers <= most:
        raise ValueError(
            f"--workers must be between 1 and {most} (no more than --concurrency, "
            f"{concurrency}, and at most {MAX_WORKERS}), got {workers}"
        )
    if epochs is not None and not 1 <= epochs <= MAX_EPOCHS:
        raise ValueError(f"--epochs must be between 1 and {MAX_EPOCHS}, got {epochs}")
    if fail_under is not None and not 0 <= fail_under <= 1:
        raise ValueError(f"--fail-under must be between 0 and 1, got {fail_under}")
    for name in plugins:
        try:
            load_plugin(name)
        except PluginError as exc:
            raise BadInput(f"--plugin {name}: {exc}") from None
    servers = tuple(parse_server_option(text) for text in mcp)
    names = [server.name for server in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"--mcp names a server twice: {', '.join(names)}")
    max_output_tokens = (
        max_output_tokens if max_output_tokens is not None else int(settings.AGENTLAB_MAX_OUTPUT_TOKENS)
    )
    if max_output_tokens < 1:
        raise ValueError(f"--max-output-tokens must be at least 1, got {max_output_tokens}")
    if (price_in is None) != (price_out is None):
        raise ValueError("--price-in and --price-out go together: give both (US dollars per million tokens)")
    price = None
    if price_in is not None and price_out is not None:
        if not (math.isfinite(price_in) and math.isfinite(price_out)) or price_in < 0 or price_out < 0:
            raise ValueError(
                f"--price-in and --price-out must be numbers ≥ 0, got {price_in} and {price_out}"
            )
        price = Price(input_per_mtok=price_in, output_per_mtok=price_out)
    return EvalRequest(
        dataset=dataset,
        run_id=run_id_check(run_id) if run_id is not None else None,
        limit=limit,
        concurrency=concurrency,
        max_steps=max_steps,
        model=model,
        fail_under=fail_under,
        review=review,
        retry_errors=retry_errors,
        workers=workers,
        plugins=tuple(dict.fromkeys(p.strip() for p in plugins if p.strip())),
        mcp_servers=servers,
        max_output_tokens=max_output_tokens,
        price=price,
        epochs=epochs,
        judge_model=(judge_model or "").strip() or None,
    )


class Progress(Protocol):
    """A progress bar (``tqdm`` has this shape)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


#: ``(run id, examples to drive) -> Progress``: the bar of one run.
ProgressFactory = Callable[[str, int], Progress]


@dataclass(frozen=True)
class EvalResult:
    """A finished run: its row (status, config and metrics stored), its
    dataset, and ``gate_failure`` — why it fails ``fail_under``, or ``None``."""

    run: Run
    dataset: Dataset
    gate_failure: str | None


class RunInterrupted(Exception):
    """Ctrl-C stopped the run; it was finished as ``cancelled`` and resumes
    with the same run id (``run_id``)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {shlex.quote(run_id)} was interrupted")
        self.run_id = run_id


def gate_failure(metrics: dict[str, Any], fail_under: float | None) -> str | None:
    """Why a run's ``metrics`` fail ``--fail-under`` (accuracy below it, or
    nothing scored: nothing scored cannot pass a bar, not even 0), or ``None``."""
    if fail_under is None:
        return None
    accuracy = metrics.get("accuracy")
    if accuracy is None:
        return (
            f"no example could be scored ({metrics.get('unscored', 0)} unscored of "
            f"{metrics.get('total', 0)}), so accuracy cannot meet --fail-under {fail_under}"
        )
    if accuracy < fail_under:
        return f"accuracy {accuracy:.3f} is below --fail-under {fail_under}"
    return None


def run_eval(*, request: EvalRequest, note: Callable[[str], None], progress: ProgressFactory) -> EvalResult:
    """Evaluate the agent over ``request.dataset`` and return the finished run.

    Before anything is written: the provider is built and a local GGUF model
    loaded (a file that is not a GGUF would otherwise fail every example).
    Then the dataset is resolved (``dataset_resolve``), the run started or
    resumed under this process's lease (``run_start``, renewed by
    ``RunLease`` until the end), planned (``run_plan``), driven in this
    process or in ``request.workers`` processes, and finished with its
    metrics (``run_finish``) — on every path, errors included (status
    ``error``).

    Raises ``RunInterrupted`` on Ctrl-C (the run is finished as
    ``cancelled``); ``ValueError`` for ``workers > 1`` with the local model;
    ``BadInput`` / ``StateConflict`` / ``DatasetFormatError`` /
    ``LocalModelUnavailable`` from the steps above; anything raised while
    driving after finishing the run.
    """
    provider = get_provider(model=request.model, price=request.price)
    if request.workers > 1 and provider.name == "local":
        raise ValueError(
            "--workers above 1 needs an OpenAI-compatible endpoint (AGENTLAB_LLM_BASE_URL): "
            "each worker would load its own copy of the local model"
        )
    if isinstance(provider, LocalGGUFProvider):
        provider.load()
    judge_check(judge_model=request.judge_model, run_model=request.model)
    dataset = dataset_resolve(name_or_path=request.dataset)
    # the random part keeps two runs started in the same second apart
    run_id = request.run_id or f"{dataset.name}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    try:
        return _run_eval(
            request=request, note=note, progress=progress, provider=provider, dataset=dataset, run_id=run_id
        )
    except (DatabaseOutage, DatabaseError) as exc:
        if not isinstance(exc, DatabaseOutage) and not is_connection_error(exc):
            raise
        # --run-id resumes the run, or starts it when it was never created
        raise RunOutage(run_id, str(DatabaseOutage.of(exc))) from exc


def _run_eval(
    *,
    request: EvalRequest,
    note: Callable[[str], None],
    progress: ProgressFactory,
    provider: LLMProvider,
    dataset: Dataset,
    run_id: str,
) -> EvalResult:
    """``run_eval`` from its run id on: start or resume, plan, drive, finish."""
    extensions = run_extensions(dataset=dataset, plugins=request.plugins, mcp_servers=request.mcp_servers)
    existing = Run.objects.filter(run_id=run_id).values_list("config", flat=True).first()
    if existing is not None:
        extensions = extensions_resume(extensions, run_id=run_id, config=existing)
    # a resume without --epochs keeps the run's; another number is refused by run_start
    epochs = request.epochs or int((existing or {}).get("epochs") or 1)
    config = {
        **_config(request, provider, dataset),
        **extensions_snapshot(extensions, dataset=dataset),
        "epochs": epochs,
        "judge_model": request.judge_model,
    }
    # the run's lease: another run_eval on this run id is refused while we drive it
    driver = run_lease_tag()
    run, resumed = run_start(run_id=run_id, dataset=dataset, config=config, driver=driver)
    lease = RunLease(run_pk=run.pk, driver=driver).start()
    try:
        planned, skipped = run_plan(
            run=run,
            limit=request.limit,
            max_steps=request.max_steps,
            model=provider.model,
            retry_errors=request.retry_errors,
            max_output_tokens=request.max_output_tokens,
            epochs=epochs,
        )
        note(_plan_note(run, dataset, provider, planned=len(planned), skipped=skipped, resumed=resumed))
        fallback = fallback_note(dataset_fallback_task_types(dataset=dataset))
        if fallback:
            note(fallback)
        run = _drive_and_finish(
            run, planned, request=request, provider=provider, progress=progress, extensions=extensions
        )
    finally:
        lease.stop()
    return EvalResult(run=run, dataset=dataset, gate_failure=gate_failure(run.metrics, request.fail_under))


def _config(request: EvalRequest, provider: LLMProvider, dataset: Dataset) -> dict[str, Any]:
    """The run's config snapshot (DESIGN.md §3)."""
    return {
        "provider": provider.name,
        "model": provider.model,
        "max_steps": request.max_steps,
        "concurrency": request.concurrency,
        "limit": request.limit,
        "scorer": "per example, else per dataset, else per task type",
        "dataset": dataset.name,
        "code_version": code_version(),
        "review": request.review,
        "workers": request.workers,
        "max_output_tokens": request.max_output_tokens,
        # None: the provider's own cost, else the genai-prices table, else unknown
        "price": request.price.to_dict() if request.price is not None else None,
    }


def _plan_note(
    run: Run, dataset: Dataset, provider: LLMProvider, *, planned: int, skipped: int, resumed: bool
) -> str:
    in_run = run.predictions.count()
    return (
        f"run {shlex.quote(run.run_id)} on {dataset.name}: {planned} to do, {skipped} already done"
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
    )


def _drive_and_finish(
    run: Run,
    planned: list[PlannedExample],
    *,
    request: EvalRequest,
    provider: LLMProvider,
    progress: ProgressFactory,
    extensions: RunExtensions,
) -> Run:
    """Drive ``planned`` and finish ``run`` whatever happens; returns the finished run."""
    bar = progress(run.run_id, len(planned))
    driven = 0

    def done(*_: Any) -> None:
        nonlocal driven
        driven += 1
        bar.update(1)

    status = RunStatus.SUCCESS
    started = time.monotonic()
    wall_s: float | None = None
    outage = False
    try:
        if request.workers > 1 and len(planned) > 1:
            asyncio.run(provider.aclose())  # the workers build their own
            wall_s = drive_in_processes(
                planned,
                workers=request.workers,
                concurrency=request.concurrency,
                model=request.model,
                review=request.review,
                price=request.price,
                on_done=done,
                extensions=extensions,
                run_id=run.run_id,
                dataset=run.dataset.name,
            )
        else:
            asyncio.run(
                _drive(
                    planned,
                    provider=provider,
                    request=request,
                    on_done=done,
                    extensions=extensions,
                    run_id=run.run_id,
                    dataset=run.dataset.name,
                )
            )
        # the LLM judge grades the answers it is to score once the turns are done
        judge_pass(
            run=run, judge_model=request.judge_model, run_model=request.model, concurrency=request.concurrency
        )
    except KeyboardInterrupt:
        status = RunStatus.CANCELLED
        raise RunInterrupted(run.run_id) from None
    except BaseException as exc:
        status = RunStatus.ERROR
        outage = isinstance(exc, DatabaseOutage)
        raise
    finally:
        bar.close()
        # this thread's connection sat idle while the pool drove: a restart
        # meanwhile must cost a reconnect here, not the run's finish
        connections_retire_broken()
        try:
            run = run_finish(
                run=run,
                status=status,
                driven=driven,
                wall_s=wall_s if wall_s is not None else time.monotonic() - started,
            )
        except DatabaseError as exc:
            # still down: the resume finishes the run (its metrics are
            # recomputed from the stored rows) — report the outage, not this
            if not (outage and is_connection_error(exc)):
                raise
    return run


async def _drive(
    planned: Sequence[PlannedExample],
    *,
    provider: LLMProvider,
    request: EvalRequest,
    on_done: Callable[[PlannedExample], None],
    extensions: RunExtensions,
    run_id: str,
    dataset: str,
) -> None:
    with DatabaseThreads(max_workers=min(request.concurrency, 8)) as db:
        try:
            await drive_examples(
                planned,
                provider=provider,
                db=db,
                concurrency=request.concurrency,
                on_done=on_done,
                review=request.review,
                extensions=extensions,
                run_id=run_id,
                dataset=dataset,
            )
        finally:
            await provider.aclose()
