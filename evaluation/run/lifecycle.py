"""Writes on runs: start (or resume) a run, hold its lease while a process
drives it, finish it with its metrics.

The lease: ``run_start(driver=…)`` records which process drives the run
(``Run.driver``, a tag from ``run_lease_tag``) and when it last said so
(``Run.heartbeat_at``); ``RunLease`` renews it from a thread while
``run_eval`` drives; ``run_finish`` releases it. ``run_start`` in another
process refuses a run whose lease is live (``evaluation.selectors.run_holder``).
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from common.db import connections_retire_broken
from common.errors import StateConflict
from evaluation.models import Dataset, Experiment, Run, RunStatus
from evaluation.run.request import run_id_check
from evaluation.run.trajectory_pass import trajectory_pass
from evaluation.selectors import run_holder, run_lease_holder, run_metrics
from turns.jobs.ids import local_job_id

logger = logging.getLogger(__name__)


def _system_user(run_id: str) -> User:
    """The per-run system user that owns a run's turns (docs/architecture.md#the-driver)."""
    User = get_user_model()
    username = f"eval-{secrets.token_hex(4)}-{run_id}"[:150]
    user = User(username=username, is_active=False)
    user.set_unusable_password()
    user.save()
    return user


def run_start(
    *,
    run_id: str,
    dataset: Dataset,
    config: dict[str, Any],
    started_by: User | None = None,
    driver: str = "",
    turns_on_workers: bool = False,
    dataset_version: int | None = None,
    experiment: Experiment | None = None,
    variant: str = "",
) -> tuple[Run, bool]:
    """Start run ``run_id`` on ``dataset``, or resume it if it exists.

    Returns ``(run, resumed)``. A new run is on ``dataset_version`` (``None``:
    the dataset's latest version); a resumed one stays on the version it
    started on, even if a newer one exists. Resuming keeps the run's predictions (finished
    examples are skipped by the caller) and records the new config under
    ``config["resumes"]``. Raises ``BadInput`` for an empty run id and
    ``StateConflict`` when the run id exists on another dataset or another
    version of it than ``dataset_version`` asks for, was started
    with another provider, model, review setting or number of epochs, or is being driven by
    another process right now; nothing is written then. "Another process"
    means a live lease (``driver`` set, ``heartbeat_at`` younger than
    ``TURN_STALE_S``, its process not known to be gone) or a turn of the run
    under a live driver (``evaluation.selectors.run_holder``) — unless
    ``turns_on_workers`` (``run_eval --celery``): its turns run on Celery
    workers while nobody follows them, and only the lease counts.

    ``driver`` (``run_eval``: a job tag from ``run_lease_tag``) takes the
    run's lease in the same transaction; the caller then renews it
    (``run_heartbeat``) and ``run_finish`` releases it. ``experiment`` and
    ``variant``: what a new run is a variant of (``run_experiment``). Two processes that
    create the same new run id at once: the second gets ``StateConflict``.
    """
    run_id = run_id_check(run_id)
    leased = {"driver": driver, "heartbeat_at": timezone.now() if driver else None}
    try:
        with transaction.atomic():
            return _run_start(
                run_id=run_id,
                dataset=dataset,
                config=config,
                started_by=started_by,
                leased=leased,
                turns_on_workers=turns_on_workers,
                dataset_version=dataset_version,
                labels={"experiment": experiment, "variant": variant},
            )
    except IntegrityError as exc:
        if not Run.objects.filter(run_id=run_id).exists():
            raise
        raise StateConflict(
            f"run {run_id!r} was just started by another process; wait for it to finish, "
            "then run again to resume"
        ) from exc


def _run_start(
    *,
    run_id: str,
    dataset: Dataset,
    config: dict[str, Any],
    started_by: User | None,
    leased: dict[str, Any],
    turns_on_workers: bool = False,
    dataset_version: int | None = None,
    labels: dict[str, Any] | None = None,
) -> tuple[Run, bool]:
    run = Run.objects.select_for_update().filter(run_id=run_id).first()
    if run is None:
        run = Run.objects.create(
            run_id=run_id,
            dataset=dataset,
            dataset_version=dataset_version or dataset.version,
            config=config,
            started_by=started_by,
            system_user=_system_user(run_id),
            status=RunStatus.STARTED,
            **leased,
            **(labels or {}),
        )
        return run, False
    if run.dataset_id != dataset.pk:
        raise StateConflict(f"run {run_id!r} exists on dataset {run.dataset.name!r}, not {dataset.name!r}")
    if dataset_version is not None and dataset_version != run.dataset_version:
        raise StateConflict(
            f"run {run_id!r} is on {dataset.name}@{run.dataset_version}, not @{dataset_version}: a run "
            "stays on the version it started on; start a new run id for another version"
        )
    for key in ("provider", "model", "review", "epochs"):
        if key in run.config and key in config and run.config[key] != config[key]:
            raise StateConflict(
                f"run {run_id!r} was started with {key} {run.config[key]!r}, not {config[key]!r}: "
                "one run measures one setup; start a new run id"
            )
    _subset_unchanged(run, config)
    holder = run_lease_holder(run=run) if turns_on_workers else run_holder(run=run)
    if holder is not None:
        raise StateConflict(
            f"run {run_id!r} is being driven by another process right now ({holder}). Wait for that "
            "run_eval to finish or stop it; the run can then be resumed — at once if that process ran on "
            f"this machine, else once its heartbeat is TURN_STALE_S ({float(settings.TURN_STALE_S):g} s) old"
        )
    resumes = list(run.config.get("resumes", []))
    resumes.append({"at": timezone.now().isoformat(), "config": config})
    run.config = {**run.config, "resumes": resumes}
    run.status = RunStatus.STARTED
    run.finished_at = None
    run.driver, run.heartbeat_at = leased["driver"], leased["heartbeat_at"]
    if run.system_user_id is None:
        run.system_user = _system_user(run_id)
    run.save(update_fields=["config", "status", "finished_at", "system_user", "driver", "heartbeat_at"])
    return run, True


def _subset_unchanged(run: Run, config: dict[str, Any]) -> None:
    """A resumed run keeps its subset (``--split``, ``--tag``): another one
    would measure other examples under the same run id (``StateConflict``)."""
    for key in ("split", "tags"):
        if run.config.get(key) != config.get(key):
            raise StateConflict(
                f"run {run.run_id!r} was started with {key} {run.config.get(key)!r}, not "
                f"{config.get(key)!r}: one run measures one subset; start a new run id"
            )


def run_finish(
    *, run: Run, status: str = RunStatus.SUCCESS, driven: int = 0, wall_s: float | None = None
) -> Run:
    """Score the paths (``evaluation.run.trajectory_pass``), then compute and
    store the run's metrics and final status.

    ``driven`` examples were driven in ``wall_s`` seconds by this invocation
    (a resumed run drives only what was left); they are stored as
    ``metrics["throughput"]`` = ``{"examples", "wall_s", "samples_per_s"}``.
    An invocation that drove nothing (a resume with everything done) keeps
    the throughput recorded before, if any: zero examples measure nothing.
    """
    earlier = (run.metrics or {}).get("throughput")
    trajectory_pass(run=run)  # the paths' verdicts, from the log, before the metrics count them
    run.metrics = run_metrics(run=run)
    if wall_s is not None and driven == 0 and earlier:
        run.metrics["throughput"] = earlier
    elif wall_s is not None:
        run.metrics["throughput"] = {
            "examples": driven,
            "wall_s": round(wall_s, 3),
            "samples_per_s": round(driven / wall_s, 2) if wall_s > 0 else None,
        }
    run.status = status
    run.finished_at = timezone.now()
    run.driver, run.heartbeat_at = "", None  # the lease ends with the invocation
    run.save(update_fields=["metrics", "status", "finished_at", "driver", "heartbeat_at"])
    return run


def run_release(*, run: Run) -> None:
    """Give up the run's lease and leave it ``started``, metrics untouched:
    ``run_eval --celery`` stopped following (Ctrl-C) while its turns keep
    running on the workers; the same run id follows them again."""
    Run.objects.filter(pk=run.pk, driver=run.driver).update(driver="", heartbeat_at=None)


# --------------------------------------------------------------------------- the lease


def run_lease_tag() -> str:
    """The lease tag of this process for ``run_start(driver=…)``: host and
    pid, in the form ``turns.jobs.ids.local_job_is_gone`` can judge."""
    return f"{local_job_id('eval', 0)}:run"


def run_heartbeat(*, run_pk: int, driver: str) -> bool:
    """Renew the lease ``driver`` holds on the run with primary key
    ``run_pk``; ``False`` when the lease is no longer ``driver``'s."""
    return Run.objects.filter(pk=run_pk, driver=driver).update(heartbeat_at=timezone.now()) == 1


class RunLease:
    """Keeps a run's lease alive while ``run_eval`` drives it: a daemon thread
    calls ``run_heartbeat`` every ``every`` seconds (default
    ``min(HEARTBEAT_S, TURN_STALE_S / 4)``, at least 1 s) until ``stop()``,
    so ``run_start`` in another process sees the run as taken — between
    turns and before the first one too, which the turns' own heartbeats
    cannot show. The thread uses its own database connection and closes it.
    """

    def __init__(self, *, run_pk: int, driver: str, every: float | None = None) -> None:
        self.run_pk, self.driver = run_pk, driver
        self.every = (
            every
            if every is not None
            else max(1.0, min(float(settings.HEARTBEAT_S), float(settings.TURN_STALE_S) / 4))
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RunLease:
        self._thread = threading.Thread(target=self._beat, name="agentlab-run-lease", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.every):
                try:
                    if not run_heartbeat(run_pk=self.run_pk, driver=self.driver):
                        logger.warning("run %s: the lease is no longer %s", self.run_pk, self.driver)
                        return
                except Exception:
                    logger.warning("run %s: could not renew the lease", self.run_pk, exc_info=True)
                    # a connection a database restart broke: reconnect next time
                    connections_retire_broken()
        finally:
            connections.close_all()

    def stop(self) -> None:
        """Stop renewing (``run_finish`` releases the lease). Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def run_regression_record(*, run: Run, baseline: Run, regressions: list[str]) -> Run:
    """Store the comparison of ``run`` with ``baseline``: ``regression`` is
    whether any significant regression was found, ``regressions`` their
    lines (``evaluation.compare.pairing.regressions``). Returns ``run`` updated."""
    run.regression, run.baseline, run.regressions = bool(regressions), baseline, list(regressions)
    run.save(update_fields=["regression", "baseline", "regressions"])
    return run
