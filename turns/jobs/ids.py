"""Local job ids: where a turn is driven, so a dead driver can be told (pure; no Django).

A process that drives turns itself (the inline executor, ``run_eval``) names
its jobs ``<inline|eval>-<host>-<pid>-<n>``; the claim cuts that to 40
characters and adds ``:<random>`` (``turns.driver.lease``). The host is
shortened so that the pid always survives the cut. A Celery task's id has no
such shape and is never taken for a local job.
"""

from __future__ import annotations

import functools
import os
import re
import socket

_LOCAL_JOB = re.compile(r"^(?:inline|eval)-(?P<host>.*)-(?P<pid>\d+)-\d+:")


@functools.cache
def host_tag() -> str:
    """This machine's name as a job id carries it: at most 16 characters of
    ``[A-Za-z0-9_.]``."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:16]


def local_job_id(kind: str, number: int) -> str:
    """The job id of the ``number``-th turn this process drives itself —
    ``kind`` ``"inline"`` (the inline executor) or ``"eval"`` (``run_eval``):
    ``<kind>-<host>-<pid>-<number>`` (``local_job_is_gone`` reads it back).
    Raises ``ValueError`` for another ``kind``."""
    if kind not in ("inline", "eval"):
        raise ValueError(f"unknown local job kind {kind!r}")
    return f"{kind}-{host_tag()}-{os.getpid()}-{number}"


def local_job_is_gone(job_id: str) -> bool:
    """Whether ``job_id`` (a claim token, ``Turn.job_id``) belongs to a
    process of this machine that drove turns itself (the inline executor,
    ``run_eval``; see ``local_job_id``) and no longer exists.

    ``False`` when it cannot be told: a Celery task's id, a job of another
    machine, an older id without a host, or a live pid (which may be a
    reused one: such a turn is left to the heartbeat sweep). A server
    restarted after a crash thus finds its predecessor's turns at once
    instead of after ``TURN_STALE_S``.
    """
    match = _LOCAL_JOB.match(job_id or "")
    if match is None or match["host"] != host_tag():
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False
