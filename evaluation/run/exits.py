"""How ``run_eval`` ends when it cannot finish now: the outage that stops a
run, and the command line that resumes it (docs/architecture.md#evaluation-semantics).

Exit codes (``manage.py run_eval``): 75 — ``EX_TEMPFAIL`` of sysexits.h, try
again later — when the database failed mid-run or the Celery broker cannot
be reached (``RunOutage``), 130 after
Ctrl-C; both print ``resume_command``, quoted for a POSIX shell with
``shlex``, so a run id with spaces or quotes pastes back as it was.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import DatabaseError

from common.db import is_connection_error
from evaluation.models import Run, RunStatus

#: ``run_eval``'s exit status for a database outage mid-run (sysexits.h ``EX_TEMPFAIL``).
EXIT_TEMPFAIL = 75


class RunOutage(Exception):
    """The database failed mid-run (a restart, a network cut), or with
    ``--celery`` the Celery broker could not be reached (``what``:
    ``"database"`` or ``"broker"``): the run stays resumable with the same
    run id ``run_id``; the message says what failed."""

    def __init__(self, run_id: str, detail: str, *, what: str = "database", written: bool = True) -> None:
        super().__init__(detail)
        self.run_id = run_id
        self.what = what
        #: whether the run was stored (``False``: it was not started; the
        #: same command starts it)
        self.written = written


#: ``(option, dest)`` of the ``run_eval`` options a resume repeats when given;
#: ``--plugin`` and ``--mcp`` repeat once per value.
_REPEATED: tuple[tuple[str, str], ...] = (
    ("--limit", "limit"),
    ("--concurrency", "concurrency"),
    ("--max-steps", "max_steps"),
    ("--model", "model"),
    ("--fail-under", "fail_under"),
    ("--fail-on-check", "fail_on_check"),
    ("--queue", "queue"),
    ("--max-in-flight", "max_in_flight"),
    ("--max-output-tokens", "max_output_tokens"),
    ("--price-in", "price_in"),
    ("--price-out", "price_out"),
    ("--json", "json_path"),
    ("--junit-xml", "junit_xml"),
    ("--summary-md", "summary_md"),
    ("--split", "split"),
    ("--tag", "tags"),
    ("--plugin", "plugins"),
    ("--mcp", "mcp"),
)


def resume_command(
    *, dataset: str, run_id: str, options: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> str:
    """The shell command that resumes run ``run_id``: ``<python> manage.py
    run_eval DATASET --run-id ID`` and every option of ``options`` (the
    command's parsed options, by ``dest``) that differs from ``defaults``
    (the parser's), each word ``shlex.quote``d. ``--no-review``,
    ``--retry-errors`` and ``--celery`` are repeated when given: a resume with review
    switched is refused."""
    defaults = defaults or {}
    words: list[str] = [_python(), "manage.py", "run_eval", dataset, "--run-id", run_id]
    for flag, dest in _REPEATED:
        value = options.get(dest)
        if value is None or value == defaults.get(dest):
            continue
        values: Sequence[Any] = value if isinstance(value, list | tuple) else [value]
        for one in values:
            words += [flag, str(one)]
    if options.get("review") is False:
        words.append("--no-review")
    if options.get("retry_errors"):
        words.append("--retry-errors")
    if options.get("celery"):
        words.append("--celery")
    return shlex.join(words)


def _python() -> str:
    """This interpreter, relative to the working folder when inside it."""
    executable = sys.executable or "python"
    relative = os.path.relpath(executable) if os.path.isabs(executable) else executable
    return relative if not relative.startswith("..") else executable


class DatabaseOutage(Exception):
    """The database failed while examples were driven (a restart, a network
    cut). The examples it hit were left unfinished — their turns interrupted,
    their predictions not completed — and no further example was started, so
    the same run id resumes them. The message names the first error seen."""

    @classmethod
    def of(cls, cause: BaseException | str) -> DatabaseOutage:
        """The outage that ``cause`` (an error, or a message saying it) stands for."""
        if isinstance(cause, DatabaseOutage):
            return cause
        detail = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        return cls(f"the database failed mid-run: {' '.join(detail.split())}")


@contextlib.contextmanager
def outage_as_run_outage(run_id: str) -> Iterator[None]:
    """A database outage inside is raised as ``RunOutage`` for ``run_id``
    (the same run id resumes the run, or starts it when it was never
    created; an experiment's name: the same file resumes it); other
    database errors as they come."""
    try:
        yield
    except (DatabaseOutage, DatabaseError) as exc:
        if not isinstance(exc, DatabaseOutage) and not is_connection_error(exc):
            raise
        raise RunOutage(run_id, str(DatabaseOutage.of(exc))) from exc


def gate_failure(metrics: Mapping[str, Any], fail_under: float | None) -> str | None:
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


def run_failure(run: Run, fail_under: float | None) -> str | None:
    """Why a finished run fails (exit 1): cancelled, or below ``fail_under``."""
    if run.status == RunStatus.CANCELLED:
        return (
            f"run {shlex.quote(run.run_id)} was cancelled (manage.py cancel_run); its cancelled examples "
            "run again with --retry-errors"
        )
    return gate_failure(run.metrics, fail_under)
