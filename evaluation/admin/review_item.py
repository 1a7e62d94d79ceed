"""What the review page shows of one queue item (``evaluation.admin.annotation``).

The automatic score (scorer, score, correct, the judge's grade and
explanation) is in the context only once ``user`` has labelled the item —
the hidden-score rule: a reviewer who sees the judge's grade first is
anchored by it. A pairwise item shows its two answers in the item's hidden
order, without their runs' names. A chat-turn item (a feedback queue) shows
the turn's question, answer and steps, and the end users' ratings and
comments; it has no gold answer and no automatic score.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User

from evaluation.annotation.labelling import label_history
from evaluation.datasets.from_turns import turn_question_id
from evaluation.datasets.spec import gold_display
from evaluation.models import AnnotationQueue, Prediction, QueueItem
from turns.models import Turn, TurnEvent, TurnFeedback

__all__ = ["item_context", "turn_item_context"]

STEP_TYPES = ("tool.call", "tool.result")


def _turn_steps(turn_id: int | None) -> list[dict[str, Any]]:
    if turn_id is None:
        return []
    events = TurnEvent.objects.filter(turn_id=turn_id, type__in=STEP_TYPES).order_by("seq")
    return [
        {
            "seq": e.seq,
            "type": e.type,
            "data": e.data,
            # JSON, indented: what a reviewer reads (never a Python repr)
            "pretty": json.dumps(e.data, indent=2, ensure_ascii=False, sort_keys=True, default=str),
        }
        for e in events[:200]
    ]


def _steps(prediction: Prediction) -> list[dict[str, Any]]:
    return _turn_steps(prediction.turn_id)


def _around(
    queue: AnnotationQueue, item: QueueItem, user: User, history: list[dict[str, Any]]
) -> dict[str, Any]:
    """What every item's page has: its history, the reviewer's current label
    (``mine``), who else holds it, the previous and next positions."""
    username = user.get_username()
    mine = next((h for h in history if h["reviewer"] == username and h["current"]), None)
    last = queue.items.order_by("-position").values_list("position", flat=True).first() or 0
    held = item.claimed_by if item.claimed_by_id and item.claimed_by_id != user.pk else None
    return {
        "queue": queue,
        "item": item,
        "history": history,
        "mine": mine,
        "held_by": held.get_username() if held else None,
        "previous": item.position - 1 if item.position > 1 else None,
        "next": item.position + 1 if item.position < last else None,
        "shortcuts": [(i, label) for i, label in enumerate(queue.label_set, start=1)],
    }


def turn_item_context(queue: AnnotationQueue, item: QueueItem, user: User) -> dict[str, Any]:
    """The review page's context for a chat-turn item: ``turn``, ``example``
    (``{"external_id", "question"}``: ``turn-N`` and the turn's question),
    ``answers`` (the turn's answer, evidence, reasoning and steps),
    ``feedback`` (the turn's current ratings: ``{"user", "rating",
    "comment", "at"}``, newest first) and the items' common keys; no gold
    and no score (a turn has neither)."""
    if item.turn_id is None:
        raise ValueError(f"item {item.position} of queue {queue.name!r} is a prediction, not a chat turn")
    turn = Turn.objects.get(pk=item.turn_id)
    ratings = TurnFeedback.objects.filter(turn=turn, current=True).select_related("user")
    return {
        **_around(queue, item, user, label_history(item)),
        "turn": turn,
        "example": {"external_id": turn_question_id(turn.pk), "question": turn.question},
        "gold": "",
        "answers": [
            {
                "side": "answer",
                "text": turn.answer,
                "evidence": turn.evidence,
                "reasoning": turn.reasoning,
                "steps": _turn_steps(turn.pk),
            }
        ],
        "feedback": [
            {"user": f.user.get_username(), "rating": f.rating, "comment": f.comment, "at": f.created_at}
            for f in ratings
        ],
        "score": None,
        "score_text": "",
    }


def _score_text(prediction: Prediction) -> str:
    grade = (prediction.judgement or {}).get("grade")
    verdict = "unscored" if prediction.correct is None else ("correct" if prediction.correct else "wrong")
    return f"Automatic score: {prediction.scorer or '—'} said {grade or verdict} (score {prediction.score})."


def item_context(queue: AnnotationQueue, item: QueueItem, user: User) -> dict[str, Any]:
    """The review page's context for ``item``: ``item``, ``example``,
    ``gold``, ``answers`` (one, or two for pairwise: ``{"side", "text",
    "evidence", "reasoning", "steps"}``), ``history``, ``mine`` (the
    reviewer's current label or ``None``), ``held_by`` (another reviewer
    holding it, or ``None``), ``previous``/``next`` positions, and —
    after ``user`` labelled it — ``score`` and ``score_text``. A chat-turn
    item's is :func:`turn_item_context`'s."""
    if item.turn_id is not None:
        return turn_item_context(queue, item, user)
    prediction = Prediction.objects.select_related("example").get(pk=item.prediction_id or 0)
    around = _around(queue, item, user, label_history(item))
    sides = [prediction]
    if queue.kind == "pairwise" and item.other_prediction_id:
        other = Prediction.objects.get(pk=item.other_prediction_id)
        sides = [other, prediction] if item.swapped else [prediction, other]
    names = ["left", "right"] if len(sides) == 2 else ["answer"]
    answers = [
        {
            "side": name,
            "text": p.prediction,
            "evidence": p.evidence,
            "reasoning": p.reasoning,
            "steps": _steps(p),
        }
        for name, p in zip(names, sides, strict=True)
    ]
    labelled = around["mine"] is not None
    return {
        **around,
        "example": prediction.example,
        "gold": gold_display(prediction.gold_answer),
        "answers": answers,
        "score": prediction if labelled and queue.kind == "single" else None,
        "score_text": _score_text(prediction) if labelled and queue.kind == "single" else "",
    }
