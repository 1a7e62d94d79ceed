"""How a turn shows in every admin page: its status badge, its wall time, its
stop reason, its review and its usage in words (the turn's and a prediction's
pages show them alike)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin import DASH, badge, fmt_cost, html_table
from turns.models import Turn, TurnStatus

_STATUS_COLOURS: dict[str, str] = {
    TurnStatus.QUEUED: "#6b7280",
    TurnStatus.RUNNING: "#2563eb",
    TurnStatus.WAITING: "#b45309",
    TurnStatus.SUCCEEDED: "#15803d",
    TurnStatus.FAILED: "#b91c1c",
    TurnStatus.CANCELLED: "#6b7280",
    TurnStatus.INTERRUPTED: "#c2410c",
}


def status_badge(status: str) -> SafeString:
    """A turn status (``TurnStatus`` value) as a coloured badge; unknown values in grey."""
    return badge(status, _STATUS_COLOURS.get(status, "#374151"))


def turn_duration_ms(turn: Turn) -> float | None:
    """Wall time of a turn in ms: the driver's ``total_ms``, else finished − started."""
    total = (turn.timings or {}).get("total_ms")
    if total is not None:
        return float(total)
    if turn.started_at and turn.finished_at:
        return (turn.finished_at - turn.started_at).total_seconds() * 1000
    return None


def stop_reason_text(stop_reason: str) -> str:
    """A stop reason for people: ``length`` says that the answer was truncated."""
    if stop_reason == "length":
        return "length — truncated (output-token limit)"
    return stop_reason or DASH


def review_text(review: Mapping[str, Any] | None) -> str:
    """What a review said, in words: its verdict and its note (or, for a
    retry, its instruction), or that the reviewer gave no readable verdict and
    the answer stood."""
    if not review:
        return "not reviewed"
    verdict = str(review.get("verdict") or "")
    late = " (arrived after the turn finished)" if review.get("late") else ""
    if verdict == "failed":
        error = f" ({review['error']})" if review.get("error") else ""
        return f"the reviewer gave no readable verdict; the answer stands{error}{late}"
    words = {"accept": "accepted", "retry": "asked for a retry", "cannot_judge": "could not judge"}
    said = review.get("retry_instruction") if verdict == "retry" else review.get("note")
    return words.get(verdict, verdict) + (f" — {said}" if said else "") + late


def usage_html(usage: Mapping[str, Any] | None) -> SafeString:
    """A ``UsageTotals.to_dict()`` as a table: all calls, the agent's and the
    reviewer's (``by_role``), then each model; unknown tokens and cost are
    said so (cost "—", never $0)."""
    usage = usage or {}
    if not usage.get("calls"):
        return format_html("<span>{}</span>", DASH)

    def row(name: str, u: Mapping[str, Any]) -> tuple[Any, ...]:
        return (
            name,
            u.get("calls", 0),
            u.get("unknown_calls", 0),
            f"{int(u.get('input_tokens') or 0):,}",
            f"{int(u.get('output_tokens') or 0):,}",
            fmt_cost(u.get("cost")),
        )

    roles = usage.get("by_role") or {}
    rows = (
        [row("all calls", usage)]
        + [row(f"{role} calls", roles[role]) for role in ("agent", "review") if role in roles]
        + [row(f"model {m}", u) for m, u in sorted((usage.get("by_model") or {}).items())]
    )
    return html_table(
        ("calls of", "calls", "calls with unknown usage", "input tokens", "output tokens", "cost"), rows
    )
