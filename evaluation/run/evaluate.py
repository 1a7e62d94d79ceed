"""``run_eval``'s body, a service over the others: resolve the dataset, start
(or resume) the run, plan it, drive its examples, finish it (docs/architecture.md#evaluation-semantics).

It sits above the writes (``lifecycle``, ``plan``, ``record``) and the
drivers (``evaluation.run.inprocess`` in process, ``evaluation.run.on_workers``
on Celery workers): imports point down, never round.

``manage.py run_eval`` parses its options into an ``EvalRequest``
(``eval_request``), checks the database, calls ``run_eval`` and maps the
``EvalResult`` and the errors to exit codes; nothing here prints or exits.
Progress goes to the caller through ``note`` (one line of text for the user)
and ``progress`` (a bar per run, e.g. ``tqdm``).
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from agentlab.agent.extensions import RunExtensions
from agentlab.agent.providers.local import LocalGGUFProvider
from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads, connections_retire_broken, is_connection_error
from common.version import code_version
from evaluation.datasets.services import dataset_fallback_task_types, dataset_resolve_ref, fallback_note
from evaluation.datasets.versions import DatasetRef
from evaluation.judge.judge_pass import judge_pass
from evaluation.judge.provider import judge_check
from evaluation.models import Dataset, Prediction, Run, RunStatus
from evaluation.run.exits import RunOutage
from evaluation.run.extensions import extensions_resume, extensions_snapshot, mcp_preflight, run_extensions
from evaluation.run.inprocess import DatabaseOutage, drive_examples
from evaluation.run.lifecycle import RunLease, run_finish, run_lease_tag, run_release, run_start
from evaluation.run.notes import plan_line, review_resolved
from evaluation.run.on_workers import BrokerUnavailable, broker_check, follow_run, queue_readers
from evaluation.run.plan import PlannedExample, run_plan
from evaluation.run.progress import Progress, ProgressFactory
from evaluation.run.request import EvalRequest
from turns.llm import get_provider
from turns.models import TurnStatus


@dataclass(frozen=True)
class EvalResult:
    """A finished run: its row (status, config and metrics stored), its
    dataset, and ``gate_failure`` — why it fails ``fail_under``, or ``None``."""

    run: Run
    dataset: Dataset
    gate_failure: str | None


class RunInterrupted(Exception):
    """Ctrl-C stopped the run; it resumes with the same run id (``run_id``).
    In process it was finished as ``cancelled``; with ``turns_keep_running``
    (``--celery``) only the following stopped: the run stays ``started`` and
    its turns run on the workers."""

    def __init__(self, run_id: str, *, turns_keep_running: bool = False, left: str = "") -> None:
        super().__init__(f"run {shlex.quote(run_id)} was interrupted")
        self.run_id = run_id
        self.turns_keep_running = turns_keep_running
        #: with ``turns_keep_running``: what is left on the workers, in words
        self.left = left


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
    process or on Celery workers (``request.celery``), and finished with its
    metrics (``run_finish``) — on every path, errors included (status
    ``error``).

    Raises ``RunInterrupted`` on Ctrl-C (the run is finished as
    ``cancelled``; with ``celery`` the turns keep running and the run stays
    ``started``); ``RunOutage`` when the database fails mid-run, and with
    ``celery`` when the broker cannot be reached (checked before the run is
    written) or fails mid-run (the run stays ``started``); ``ValueError``
    for ``celery`` with the local model; ``BadInput`` / ``StateConflict`` /
    ``DatasetFormatError`` / ``LocalModelUnavailable`` from the steps above;
    anything raised while driving after finishing the run.
    """
    provider = get_provider(model=request.model, price=request.price)
    if request.celery and provider.name == "local":
        raise ValueError(
            "--celery needs an OpenAI-compatible endpoint (AGENTLAB_LLM_BASE_URL): "
            "each worker would load its own copy of the local model"
        )
    if isinstance(provider, LocalGGUFProvider):
        provider.load()
    judge_check(judge_model=request.judge_model, run_model=request.model)
    ref = dataset_resolve_ref(name_or_path=request.dataset)
    dataset = ref.dataset
    # the random part keeps two runs started in the same second apart
    run_id = request.run_id or f"{dataset.name}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    if request.celery:
        try:
            broker_check()  # before the run is written: a broker that is down costs nothing
        except BrokerUnavailable as exc:
            raise RunOutage(
                run_id, f"{str(exc).rstrip('.')}; the run was not started", what="broker", written=False
            ) from None
    try:
        return _run_eval(
            request=request, note=note, progress=progress, provider=provider, ref=ref, run_id=run_id
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
    ref: DatasetRef,
    run_id: str,
) -> EvalResult:
    """``run_eval`` from its run id on: start or resume, plan, drive, finish."""
    dataset = ref.dataset  # on the version asked for (a new run), else the run's own
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
        **_config(request, provider, dataset),
        **extensions_snapshot(extensions, dataset=dataset),
        "epochs": epochs,
        "judge_model": request.judge_model,
    }
    run, resumed, driver = _start(run_id, ref, config, celery=request.celery)
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
            live_ok=request.celery,
        )
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
        for line in _warnings(dataset, request, planned=len(planned)):
            note(line)
        run = _drive_and_finish(
            run, planned, request=request, provider=provider, progress=progress, extensions=extensions
        )
    finally:
        lease.stop()
    failure = (
        f"run {shlex.quote(run.run_id)} was cancelled (manage.py cancel_run); its cancelled examples "
        "run again with --retry-errors"
        if run.status == RunStatus.CANCELLED
        else gate_failure(run.metrics, request.fail_under)
    )
    return EvalResult(run=run, dataset=dataset, gate_failure=failure)


def _start(run_id: str, ref: DatasetRef, config: dict[str, Any], *, celery: bool) -> tuple[Run, bool, str]:
    """``run_start`` on the version asked for, with the run's lease — another
    ``run_eval`` on this run id is refused while we drive it: (run, resumed, lease tag)."""
    driver = run_lease_tag()
    run, resumed = run_start(
        run_id=run_id,
        dataset=ref.dataset,
        config=config,
        driver=driver,
        turns_on_workers=celery,
        dataset_version=ref.version,
    )
    return run, resumed, driver


def _warnings(dataset: Dataset, request: EvalRequest, *, planned: int) -> list[str]:
    """What the plan line is followed by: the task types scored by a
    fallback scorer, and a Celery queue that no worker reads."""
    lines = [fallback_note(dataset_fallback_task_types(dataset=dataset))]
    if request.celery and planned and not queue_readers(request.queue):
        lines.append(
            f"no Celery worker reads queue {request.queue!r} now: the run waits until one does "
            f"(celery -A agentlab worker --pool threads -Q {shlex.quote(request.queue)}); "
            "Ctrl-C stops waiting"
        )
    return [line for line in lines if line]


def _config(request: EvalRequest, provider: LLMProvider, dataset: Dataset) -> dict[str, Any]:
    """The run's config snapshot (docs/architecture.md#the-data-model)."""
    return {
        "provider": provider.name,
        "model": provider.model,
        # the endpoint the predictions are made with: it travels with the run
        # to the Celery workers (the key does not: each process has its own)
        "base_url": getattr(provider, "base_url", None),
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
    }


class _Tally:
    """How far a run's drive got: its progress bar, the examples driven, and
    whether the run was released to be followed again (not finished here)."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.driven = 0
        self.released = False

    def done(self, *_: Any) -> None:
        self.driven += 1
        self.bar.update(1)


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
    tally = _Tally(progress(run.run_id, len(planned)))
    status = RunStatus.SUCCESS
    started = time.monotonic()
    outage = False
    try:
        status = _drive_all(
            run, planned, request=request, provider=provider, extensions=extensions, tally=tally
        )
    except (RunInterrupted, RunOutage):
        raise
    except KeyboardInterrupt:
        status = RunStatus.CANCELLED
        raise RunInterrupted(run.run_id) from None
    except BaseException as exc:
        status = RunStatus.ERROR
        outage = isinstance(exc, DatabaseOutage)
        raise
    finally:
        tally.bar.close()
        # this thread's connection sat idle while the pool drove: a restart
        # meanwhile must cost a reconnect here, not the run's finish
        connections_retire_broken()
        if not tally.released:
            run = _finish(run, status=status, driven=tally.driven, started=started, outage=outage)
    return run


def _drive_all(
    run: Run,
    planned: list[PlannedExample],
    *,
    request: EvalRequest,
    provider: LLMProvider,
    extensions: RunExtensions,
    tally: _Tally,
) -> RunStatus:
    """Drive the examples (on Celery workers or in this process), then let
    the LLM judge grade what awaits it; the run's status so far."""
    status = RunStatus.SUCCESS
    if request.celery:
        if _follow_on_workers(run, planned, request=request, provider=provider, tally=tally):
            status = RunStatus.CANCELLED
    else:
        asyncio.run(
            _drive(
                planned,
                provider=provider,
                request=request,
                on_done=tally.done,
                extensions=extensions,
                run_id=run.run_id,
                dataset=run.dataset.name,
            )
        )
    if Run.objects.filter(pk=run.pk, status=RunStatus.CANCELLED).exists() or (
        # examples cancel_run ended before they ran, not driven again
        # (--retry-errors does): the run stays cancelled, never a baseline
        Prediction.objects.filter(run=run, stop_reason="cancelled").exists()
    ):
        status = RunStatus.CANCELLED  # manage.py cancel_run
    # the LLM judge grades the answers it is to score once the turns are done
    if status != RunStatus.CANCELLED:
        judge_pass(
            run=run,
            judge_model=request.judge_model,
            run_model=request.model,
            concurrency=request.concurrency,
        )
    return status


def _follow_on_workers(
    run: Run, planned: list[PlannedExample], *, request: EvalRequest, provider: LLMProvider, tally: _Tally
) -> bool:
    """``--celery``: send the examples and follow them until done; True when
    the run was cancelled meanwhile. Ctrl-C and a broker outage release the
    run (its turns keep running) and raise."""
    asyncio.run(provider.aclose())  # the workers build their own
    try:
        return follow_run(
            run,
            planned,
            queue=request.queue,
            max_in_flight=request.max_in_flight,
            on_done=tally.done,
            on_poll=lambda: tally.bar.update(0),  # a plain line is due every few seconds
        )
    except KeyboardInterrupt:
        tally.released = True
        run_release(run=run)  # the turns keep running; the run id follows them again
        raise RunInterrupted(
            run.run_id, turns_keep_running=True, left=_left_on_workers(run, request.queue)
        ) from None
    except KombuOperationalError as exc:
        # the broker went away while turns were being sent: those sent
        # run on; the same run id sends the rest and follows them all
        tally.released = True
        run_release(run=run)
        raise RunOutage(run.run_id, f"the Celery broker failed mid-run: {exc}", what="broker") from None


def _left_on_workers(run: Run, queue: str) -> str:
    """What Ctrl-C leaves behind on Celery, said truly: how many of the run's
    open turns are running on a worker and how many wait in ``queue`` (and
    that no worker reads it, when none does) — not "they keep running" when
    none was ever taken."""
    open_turns = Prediction.objects.filter(run=run, completed_at__isnull=True, turn__isnull=False)
    running = open_turns.filter(turn__status__in=(TurnStatus.RUNNING, TurnStatus.WAITING)).count()
    waiting = open_turns.filter(turn__status__in=(TurnStatus.QUEUED, TurnStatus.INTERRUPTED)).count()
    parts = []
    if running:
        parts.append(f"{running} turn(s) are running on the workers")
    if waiting:
        readers = queue_readers(queue)
        parts.append(
            f"{waiting} wait in queue {queue!r}"
            + ("" if readers else " — no worker reads it, so none will start")
        )
    return "; ".join(parts) or "no turn is left on the workers"


def _finish(run: Run, *, status: RunStatus, driven: int, started: float, outage: bool) -> Run:
    """``run_finish``; when the database is still down after an outage the
    resume finishes the run instead (its metrics are recomputed from the
    stored rows), so the outage is what is reported, not this."""
    try:
        return run_finish(run=run, status=status, driven=driven, wall_s=time.monotonic() - started)
    except DatabaseError as exc:
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
    with DatabaseThreads(max_workers=min(request.concurrency, int(settings.AGENTLAB_DB_THREADS_MAX))) as db:
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
