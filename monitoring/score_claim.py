"""The claim on a (turn, evaluator) pair that one delivery of the online
scoring task holds while it scores — so a duplicate delivery arriving at the
same moment pays no judge call (docs/monitoring.md#online-evaluators).

On PostgreSQL the claim is a session-level advisory lock
(``pg_try_advisory_lock``, https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS)
on a 64-bit key derived from the pair: it is taken without waiting, released
when scoring ends, and released by the server when the holder's connection
ends — a worker that dies mid-judge leaves no claim behind, so the
redelivered task scores the turn (at-least-once). On SQLite, where jobs run
inside the one process (the inline pool), it is a lock of this process.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from common.sql import advisory_lock_sql, execute

__all__ = ["score_claim"]

_held: set[tuple[int, int]] = set()
_held_lock = threading.Lock()


def _key(turn_id: int, evaluator_id: int) -> int:
    """A signed 64-bit advisory-lock key for the pair, namespaced to online scoring."""
    digest = hashlib.blake2b(f"agentlab.online-score:{turn_id}:{evaluator_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


@contextmanager
def score_claim(*, turn_id: int, evaluator_id: int) -> Iterator[bool]:
    """Claim (``turn_id``, ``evaluator_id``) for the body of the ``with``:
    yields ``True`` when this delivery holds it, ``False`` when another
    delivery does (do nothing then). Never waits."""
    if connection.vendor == "postgresql":
        key = _key(turn_id, evaluator_id)
        rows, _ = execute(connection, advisory_lock_sql(connection), [key])
        held = bool(rows[0][0])
        try:
            yield held
        finally:
            if held:
                execute(connection, advisory_lock_sql(connection, unlock=True), [key])
        return
    pair = (turn_id, evaluator_id)
    with _held_lock:
        held = pair not in _held
        _held.add(pair)
    try:
        yield held
    finally:
        if held:
            with _held_lock:
                _held.discard(pair)
