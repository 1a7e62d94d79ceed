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
import logging
import resource
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

from agentlab.telemetry import telemetry_start
from common.db import DatabaseThreads, connections_retire_broken, is_connection_error
from common.errors import BadInput
from evaluation.judge.judge_pass import judge_pass
from evaluation.models import Dataset, Prediction, Run, RunStatus
from evaluation.run.check_gate import check_gate_failure
from evaluation.run.exits import DatabaseOutage, RunOutage, outage_as_run_outage, run_failure
from evaluation.run.inprocess import drive_examples
from evaluation.run.lifecycle import run_finish, run_release
from evaluation.run.on_workers import (
    Followed,
    broker_precheck,
    follow_runs,
    queue_readers,
    queue_warning,
)
from evaluation.run.opening import CheckedEval, OpenRun, eval_check, run_open
from evaluation.run.progress import Progress, ProgressFactory
from evaluation.run.request import EvalRequest
from evaluation.run.sharing import FairShare
from turns.models import TurnStatus

logger = logging.getLogger(__name__)

#: Open files a drive needs besides one LLM connection per turn in flight and
#: one database connection per pool thread: the process's own (its modules,
#: its logs, the run's lease, MCP servers' pipes, the event loop's).
OPEN_FILES_SPARE = 256


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


def run_eval(*, request: EvalRequest, note: Callable[[str], None], progress: ProgressFactory) -> EvalResult:
    """Evaluate the agent over ``request.dataset`` and return the finished run.

    Before anything is written: the provider is built, a local GGUF model
    loaded and the dataset resolved (``eval_check``). Then the run is
    started or resumed under this process's lease and planned
    (``run_open``), driven in this process or on Celery workers
    (``request.celery``), and finished with its metrics (``run_finish``) —
    on every path, errors included (status ``error``).

    Raises ``BadInput`` for the run id of an experiment's variant (its file
    resumes it); ``RunInterrupted`` on Ctrl-C (the run is finished as
    ``cancelled``; with ``celery`` the turns keep running and the run stays
    ``started``); ``RunOutage`` when the database fails mid-run, and with
    ``celery`` when the broker cannot be reached (checked before the run is
    written) or fails mid-run (the run stays ``started``); ``ValueError``
    for ``celery`` with the local model; ``BadInput`` / ``StateConflict`` /
    ``DatasetFormatError`` / ``LocalModelUnavailable`` from the steps above;
    anything raised while driving after finishing the run.
    """
    checked = eval_check(request)
    # the random part keeps two runs started in the same second apart
    run_id = request.run_id or (
        f"{checked.ref.dataset.name}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    )
    owner = Run.objects.filter(run_id=run_id).exclude(experiment=None)
    found = owner.values_list("experiment__name", "variant").first()
    if found is not None:
        # its options are the experiment file's: run_eval's could change what it measures
        experiment, name = found
        raise BadInput(
            f"run {shlex.quote(run_id)} is variant {name!r} of experiment {experiment!r}: resume it by "
            "running the experiment's file again (manage.py run_experiment FILE)"
        )
    if request.celery:
        broker_precheck(run_id)
    telemetry_start()  # the tracer and metrics set up before the first turn (agentlab.telemetry)
    with outage_as_run_outage(run_id):
        opened = open_run(checked, run_id=run_id, note=note)
        try:
            run = _drive_and_finish(opened, progress=progress)
        finally:
            opened.lease.stop()
    failure = run_failure(run, request.fail_under) or check_gate_failure(run.metrics, request.fail_on_checks)
    return EvalResult(run=run, dataset=opened.dataset, gate_failure=failure)


def open_run(checked: CheckedEval, *, run_id: str, note: Callable[[str], None], **variant: Any) -> OpenRun:
    """``run_open``, then — on Celery — a note when no worker reads the run's
    queue. ``variant``: ``run_open``'s ``experiment`` and ``variant``."""
    opened = run_open(checked, run_id=run_id, note=note, **variant)
    if opened.request.celery:
        line = queue_warning(queue=opened.request.queue, planned=len(opened.planned))
        if line:
            note(line)
    return opened


class Tally:
    """How far a run's drive got: its progress bar, the examples driven, and
    whether the run was released to be followed again (not finished here)."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.driven = 0
        self.released = False
        #: when its last example was done (``time.monotonic()``; ``None``: none yet)
        self.last: float | None = None

    def begin(self, item: Any) -> None:
        """An example started (a plain progress line counts it in flight)."""
        begin = getattr(self.bar, "begin", None)
        if begin is not None:
            begin(id(item))

    def done(self, item: Any = None, *_: Any) -> None:
        self.driven += 1
        self.last = time.monotonic()
        end = getattr(self.bar, "end", None)
        if end is not None:
            end(id(item))
        self.bar.update(1)


def drive_and_finish(
    opens: Sequence[OpenRun], *, progress: ProgressFactory, concurrency: int, name: str
) -> list[Run]:
    """Drive the planned examples of every open run and finish each run
    whatever happens; returns the finished runs in order.

    In process the runs are driven at once in one event loop, sharing
    ``concurrency`` examples in flight fairly (``FairShare``) and one
    database pool; on Celery (the first run's ``request.celery``: all or
    none) they are sent and followed together. ``name``: what Ctrl-C
    interrupted (a run id, or an experiment's name), for ``RunInterrupted``.
    """
    tallies = [Tally(progress(opened.run.run_id, len(opened.planned))) for opened in opens]
    statuses = [RunStatus.SUCCESS] * len(opens)
    started = time.monotonic()
    outage = False
    finished: list[Run] = []
    try:
        statuses = _drive_all(opens, tallies, concurrency=concurrency, name=name)
    except (RunInterrupted, RunOutage):
        raise
    except KeyboardInterrupt:
        statuses = [RunStatus.CANCELLED] * len(opens)
        raise RunInterrupted(name) from None
    except BaseException as exc:
        statuses = [RunStatus.ERROR] * len(opens)
        outage = isinstance(exc, DatabaseOutage)
        raise
    finally:
        for tally in tallies:
            tally.bar.close()
        # this thread's connection sat idle while the pool drove: a restart
        # meanwhile must cost a reconnect here, not the run's finish
        connections_retire_broken()
        for opened, tally, status in zip(opens, tallies, statuses, strict=True):
            run = opened.run
            if not tally.released:
                # a run's own wall time: up to its last example, not the slowest run's
                ended = tally.last if tally.last is not None else time.monotonic()
                run = _finish(run, status=status, driven=tally.driven, wall_s=ended - started, outage=outage)
            finished.append(run)
    return finished


def _drive_and_finish(opened: OpenRun, *, progress: ProgressFactory) -> Run:
    """``drive_and_finish`` of one run at its own concurrency."""
    runs = drive_and_finish(
        [opened], progress=progress, concurrency=opened.request.concurrency, name=opened.run.run_id
    )
    return runs[0]


def _drive_all(
    opens: Sequence[OpenRun], tallies: Sequence[Tally], *, concurrency: int, name: str
) -> list[RunStatus]:
    """Drive the examples (on Celery workers or in this process), then let
    the LLM judge grade what awaits it; each run's status so far."""
    cancelled: set[int] = set()
    if opens and opens[0].request.celery:
        cancelled = _follow_on_workers(opens, tallies, name=name)
    else:
        asyncio.run(_drive(opens, tallies, concurrency=concurrency))
    statuses = []
    for opened in opens:
        run, request = opened.run, opened.request
        status = RunStatus.CANCELLED if run.pk in cancelled else RunStatus.SUCCESS
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
        statuses.append(status)
    return statuses


def _follow_on_workers(opens: Sequence[OpenRun], tallies: Sequence[Tally], *, name: str) -> set[int]:
    """``--celery``: send the runs' examples and follow them until done; the
    primary keys of the runs cancelled meanwhile. Ctrl-C and a broker outage
    release the runs (their turns keep running) and raise."""
    request = opens[0].request
    for opened in opens:
        asyncio.run(opened.provider.aclose())  # the workers build their own
    try:
        return follow_runs(
            [
                Followed(run=opened.run, planned=opened.planned, on_done=tally.done)
                for opened, tally in zip(opens, tallies, strict=True)
            ],
            queue=request.queue,
            max_in_flight=request.max_in_flight,
            # a plain line is due every few seconds even when nothing finished
            on_poll=lambda: [tally.bar.update(0) for tally in tallies],
        )
    except KeyboardInterrupt:
        _release(opens, tallies)  # the turns keep running; the same command follows them again
        left = "; ".join(
            (f"{opened.run.run_id}: " if len(opens) > 1 else "") + _left_on_workers(opened.run, request.queue)
            for opened in opens
        )
        raise RunInterrupted(name, turns_keep_running=True, left=left) from None
    except KombuOperationalError as exc:
        # the broker went away while turns were being sent: those sent
        # run on; the same command sends the rest and follows them all
        _release(opens, tallies)
        raise RunOutage(name, f"the Celery broker failed mid-run: {exc}", what="broker") from None


def _release(opens: Sequence[OpenRun], tallies: Sequence[Tally]) -> None:
    for opened, tally in zip(opens, tallies, strict=True):
        tally.released = True
        run_release(run=opened.run)


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


def _finish(run: Run, *, status: RunStatus, driven: int, wall_s: float, outage: bool) -> Run:
    """``run_finish`` with the run's driving time ``wall_s`` (seconds); when
    the database is still down after an outage the resume finishes the run
    instead (its metrics are recomputed from the stored rows), so the outage
    is what is reported, not this."""
    try:
        return run_finish(run=run, status=status, driven=driven, wall_s=wall_s)
    except DatabaseError as exc:
        if not (outage and is_connection_error(exc)):
            raise
        return run


async def _drive(opens: Sequence[OpenRun], tallies: Sequence[Tally], *, concurrency: int) -> None:
    """Drive every open run's examples in this event loop: at most
    ``concurrency`` in flight in all, shared fairly between the runs, over
    one database pool; each run's provider is closed at the end."""
    share = FairShare(concurrency)
    threads = min(concurrency, int(settings.AGENTLAB_DB_THREADS_MAX))
    # a socket to the LLM per turn in flight, a connection per database thread:
    # more than the usual soft limit of 1024 at --concurrency 1024
    open_files_allow(concurrency + threads + OPEN_FILES_SPARE)
    ticker = asyncio.create_task(_tick(tallies))
    with DatabaseThreads(max_workers=threads) as db:
        try:
            outcomes = await asyncio.gather(
                *(
                    drive_examples(
                        opened.planned,
                        provider=opened.provider,
                        db=db,
                        concurrency=concurrency,
                        gate=share.lane(),
                        on_done=tally.done,
                        on_start=tally.begin,
                        review=bool(opened.request.review),
                        extensions=opened.extensions,
                        run_id=opened.run.run_id,
                        dataset=opened.dataset.name,
                        simulator=opened.simulator,
                    )
                    for opened, tally in zip(opens, tallies, strict=True)
                ),
                return_exceptions=True,
            )
        finally:
            ticker.cancel()
            for opened in opens:
                await opened.provider.aclose()
                if opened.simulator is not None:
                    await opened.simulator.provider.aclose()
    # every run drove what it could; the first failure is the one reported
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def _tick(tallies: Sequence[Tally]) -> None:
    """Tick every run's progress once a second, so a plain line is written
    every ``AGENTLAB_PROGRESS_EVERY_S`` even while no example finishes."""
    while True:
        await asyncio.sleep(1.0)
        for tally in tallies:
            tally.bar.update(0)


def open_files_allow(needed: int) -> None:
    """Raise this process's soft limit on open files (``RLIMIT_NOFILE``) to
    its hard limit when it is below ``needed``. Each turn in flight holds a
    socket to the LLM, so ``--concurrency 1024`` needs more than the soft
    limit most Linux sessions start with (1024), while the hard limit is
    usually far higher (524288 under systemd): an exhausted limit would fail
    turns with connection errors the endpoint never caused. Logs a warning
    when even the hard limit is below ``needed``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    raised = needed if hard == resource.RLIM_INFINITY else hard
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < needed:
        logger.warning(
            "this drive may need %d open files and the process may open only %d, its hard limit "
            "(ulimit -Hn): turns may fail to connect",
            needed,
            raised,
        )
