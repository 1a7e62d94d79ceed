"""End users' feedback on chat turns (docs/chat-and-api.md#feedback): a thumbs
up or down with an optional comment, one current rating per user and turn,
its history kept.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from common.errors import BadInput, StateConflict
from turns.models import FeedbackRating, Turn, TurnFeedback, TurnKind, TurnOutcome, TurnStatus

#: The longest comment kept (characters).
MAX_COMMENT = 4000


def feedback_give(*, turn_id: int, user: User, rating: str, comment: str = "") -> TurnFeedback:
    """Record ``user``'s ``rating`` (``"up"`` or ``"down"``) and ``comment``
    on a chat turn, replacing their current one (kept as history,
    ``current=False``) in one transaction.

    Who may rate is the caller's check (``turns.selectors.turn_get``: the
    turn's owner or staff). Raises ``BadInput`` for a rating that is not up
    or down or a comment over ``MAX_COMMENT`` characters, ``StateConflict``
    for an evaluation turn or a turn that has not answered (still running,
    failed, cancelled, or asking a clarifying question)."""
    if rating not in FeedbackRating.values:
        raise BadInput(f"rating must be 'up' or 'down', got {rating!r}")
    if len(comment) > MAX_COMMENT:
        raise BadInput(f"comment is {len(comment)} characters; at most {MAX_COMMENT}")
    with transaction.atomic():
        turn = Turn.objects.select_for_update().get(pk=turn_id)
        if turn.kind != TurnKind.CHAT:
            raise StateConflict(f"turn {turn_id} is of kind {turn.kind}: feedback is for chat turns")
        if turn.status != TurnStatus.SUCCEEDED or turn.outcome != TurnOutcome.ANSWERED:
            raise StateConflict(
                f"turn {turn_id} has not answered (status {turn.status}"
                + (f", outcome {turn.outcome}" if turn.outcome else "")
                + "): feedback rates an answer"
            )
        TurnFeedback.objects.filter(turn=turn, user=user, current=True).update(current=False)
        return TurnFeedback.objects.create(turn=turn, user=user, rating=rating, comment=comment.strip())
