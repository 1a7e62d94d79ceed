"""Reading a moment given on a command line: an ISO date or date-time."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.utils.dateparse import parse_date, parse_datetime


def parse_moment(text: str, *, option: str) -> datetime:
    """An ISO date (``2026-12-01``: its midnight) or date-time, as an aware
    datetime; naive means UTC. ``ValueError`` naming ``option`` and the text
    when it is neither (an out-of-range day such as ``2026-02-30`` included)."""
    try:
        moment = parse_datetime(text)
        day: date | None = None if moment is not None else parse_date(text)
    except ValueError:
        moment, day = None, None
    if day is not None:
        moment = datetime.combine(day, time(0))
    if moment is None:
        raise ValueError(
            f"{option} must be an ISO date or date-time (2026-12-01, 2026-12-01T09:00), got {text!r}"
        )
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
