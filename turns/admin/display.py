"""How a turn shows in every admin list: its status badge and its wall time."""

from __future__ import annotations

from django.utils.safestring import SafeString

from common.admin import badge

from ..models import Turn, TurnStatus

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
