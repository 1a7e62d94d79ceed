"""A conversation example's prediction as HTML for the admin: each turn's
message, the agent's answer, the gold answer and its verdict, and how the
conversation ended (``Prediction.conversation_result``;
docs/evaluating.md#conversation-examples)."""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin import DASH, admin_link
from evaluation.datasets.spec import gold_display
from evaluation.models import Prediction
from turns.models import Conversation, Turn

_VERDICTS = {True: "right", False: "wrong", None: "not scored"}


def _row(turn: dict[str, Any]) -> tuple[Any, ...]:
    position = turn.get("position")
    link = admin_link(Turn, turn["turn_id"], str(position)) if turn.get("turn_id") else DASH
    verdict = _VERDICTS.get(turn.get("correct")) if "gold" in turn else "no gold"
    return (
        link,
        turn.get("user") or "",
        turn.get("answer") or turn.get("outcome") or DASH,
        gold_display(turn.get("gold")) or DASH,
        verdict,
    )


def conversation_html(prediction: Prediction) -> SafeString | str:
    """The conversation's turns as a table, with how it ended; ``—`` for a one-question example."""
    result = prediction.conversation_result or {}
    if not result:
        return DASH
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (_row(t) for t in result.get("turns") or []),
    )
    ended = result.get("ended") or ""
    cause = f": {result['cause']}" if result.get("cause") else ""
    conversation = (
        admin_link(Conversation, prediction.conversation_id, f"conversation #{prediction.conversation_id}")
        if prediction.conversation_id
        else DASH
    )
    return format_html(
        "<table><thead><tr><th>turn</th><th>user</th><th>agent</th><th>gold</th><th>verdict</th></tr></thead>"
        "<tbody>{}</tbody></table><p>{} — ended: {}{}</p>",
        rows,
        conversation,
        ended,
        cause,
    )
