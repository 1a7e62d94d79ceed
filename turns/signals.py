"""Signals ``turns`` sends to the layers above it, which it must not import
(docs/architecture.md#the-package-map).

``chat_turn_finished`` is sent once a chat turn's terminal event has
committed (``ChatPolicy.on_finish`` registers the send with
``transaction.on_commit``): never inside the turn's transaction, never before
its answer is readable. Keyword arguments: ``turn_id`` (int). A receiver
must be quick — it runs in the driver's database thread after the commit —
and hand any real work to a job (``monitoring`` enqueues its online scoring).
Sent with ``send_robust``: a receiver's exception is logged, never the turn's.
"""

from __future__ import annotations

import logging

from django.dispatch import Signal

logger = logging.getLogger(__name__)

#: A chat turn ended (answered, asked, failed or cancelled) and its terminal event committed.
chat_turn_finished = Signal()


def chat_turn_finished_send(turn_id: int) -> None:
    """Send :data:`chat_turn_finished` for ``turn_id``; a receiver that raises
    is logged at ERROR and does not reach the caller. Costs tens of
    microseconds with ``monitoring``'s receiver and no evaluator."""
    for _receiver, result in chat_turn_finished.send_robust(sender=None, turn_id=turn_id):
        if isinstance(result, Exception):
            logger.error("a chat_turn_finished receiver failed for turn %s: %r", turn_id, result)
