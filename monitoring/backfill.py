"""Scoring the chat turns of a past period with an online evaluator
(``manage.py backfill_online_scores``; docs/monitoring.md#backfill)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime

from monitoring.models import OnlineEvaluator
from monitoring.sampling import finished_chat_turns, turns_matching
from monitoring.scoring import online_score_turn


def evaluator_named(name_or_id: str) -> OnlineEvaluator:
    """The evaluator of that name (or id); ``ValueError`` naming it when there is none."""
    evaluator = OnlineEvaluator.objects.filter(name=name_or_id).first()
    if evaluator is None and name_or_id.isdigit():
        evaluator = OnlineEvaluator.objects.filter(pk=int(name_or_id)).first()
    if evaluator is None:
        raise ValueError(f"no online evaluator named {name_or_id!r} (see the admin's Online evaluators)")
    return evaluator


def backfill(
    *,
    evaluator: OnlineEvaluator,
    since: datetime,
    until: datetime,
    ignore_sampling: bool = False,
    progress: Callable[[int, str], None] | None = None,
) -> Counter[str]:
    """Score the finished chat turns that ended in ``[since, until)`` and pass
    the evaluator's filters, oldest first, one at a time, exactly as the
    live task does (``online_score_turn``: its sample unless
    ``ignore_sampling``, a turn scored before left alone — a second backfill
    adds nothing). Returns how many turns ended each way (``scored``,
    ``exists``, ``not sampled`` …). ``ValueError`` when ``since`` is not
    before ``until`` or the evaluator is disabled."""
    if since >= until:
        raise ValueError(f"--since ({since.isoformat()}) must be before --until ({until.isoformat()})")
    if not evaluator.enabled:
        raise ValueError(f"online evaluator {evaluator.name!r} is disabled: enable it first")
    turn_ids = (
        turns_matching(evaluator, finished_chat_turns())
        .filter(finished_at__gte=since, finished_at__lt=until)
        .order_by("finished_at", "pk")
        .values_list("pk", flat=True)
    )
    counts: Counter[str] = Counter()
    for turn_id in turn_ids.iterator():
        outcome = online_score_turn(
            turn_id=turn_id, evaluator_id=evaluator.pk, ignore_sampling=ignore_sampling
        )
        counts[outcome.status] += 1
        if progress is not None:
            progress(turn_id, outcome.status)
    return counts
