"""Handing a queued turn to whatever runs turns, after the commit
(docs/architecture.md#processes-embedded-and-production; docs/architecture.md#the-driver).

``turn_enqueue(turn_id)`` is what services call. It does not know the
executors: ``TurnsConfig.ready()`` plugs in ``turns.jobs.handover.turn_hand_over``
(Celery with ``CELERY_BROKER_URL``, else the inline executor). This keeps
the services below the driver and the jobs that run it: the jobs import the
services (the sweep), never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

#: Runs a turn in the background, given its id; called after the commit.
HandOver = Callable[[int], None]

_hand_over: HandOver | None = None


def hand_over_set(hand_over: HandOver | None) -> HandOver | None:
    """Plug in what ``turn_enqueue`` hands turns to; returns the previous one."""
    global _hand_over
    previous, _hand_over = _hand_over, hand_over
    return previous


def turn_enqueue(turn_id: int) -> None:
    """Run turn ``turn_id`` in the background once the current transaction commits.

    Outside a transaction the hand-over happens at once. Never runs the turn
    in the caller's thread. Raises ``ImproperlyConfigured`` when nothing was
    plugged in (the ``turns`` app is not installed).
    """
    hand_over = _hand_over
    if hand_over is None:
        raise ImproperlyConfigured("no turn hand-over is set: is 'turns' in INSTALLED_APPS?")
    # Handing over before the commit would let the driver look for a turn row
    # that is not visible yet (or is rolled back): the claim would find nothing.
    transaction.on_commit(lambda: hand_over(turn_id))
