"""An online evaluator's windows: the score per hour or day with its Wilson
interval and count, and the chat turns' outcome mix and latency p50/p95 over
the same windows (docs/monitoring.md#trend-and-alert). Windows are UTC hours
or days, ``[start, start + length)``, counted by the turn's end."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Avg, Count, Q
from django.db.models.functions import TruncDay, TruncHour

from evaluation.metrics.compute import percentile
from evaluation.metrics.intervals import wilson_interval
from monitoring.models import OnlineEvaluator, OnlineScore, Window
from monitoring.sampling import finished_chat_turns, turns_matching
from turns.models import FeedbackRating, TurnFeedback

#: Windows shown on the trend page by default.
DEFAULT_WINDOWS: dict[str, int] = {Window.HOURLY: 48, Window.DAILY: 30}


def window_length(window: str) -> timedelta:
    """One hour or one day; ``ValueError`` for another window name."""
    if window == Window.HOURLY:
        return timedelta(hours=1)
    if window == Window.DAILY:
        return timedelta(days=1)
    raise ValueError(f"window must be 'hourly' or 'daily', got {window!r}")


def window_floor(moment: datetime, window: str) -> datetime:
    """The start (UTC) of the window holding ``moment`` (an aware datetime)."""
    moment = moment.astimezone(UTC)
    if window == Window.HOURLY:
        return moment.replace(minute=0, second=0, microsecond=0)
    window_length(window)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _trunc(window: str, name: str) -> TruncHour | TruncDay:
    return TruncHour(name, tzinfo=UTC) if window == Window.HOURLY else TruncDay(name, tzinfo=UTC)


@dataclass(frozen=True)
class WindowCounts:
    """An evaluator's scores in one window: ``n`` scored turns (a pass or a
    fail), ``passed`` of them, the ``mean`` value (``None``: none)."""

    start: datetime
    n: int = 0
    passed: int = 0
    mean: float | None = None

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95 % Wilson interval of the pass rate (``None`` for no scores)."""
        return wilson_interval(self.passed, self.n)


def score_windows(evaluator: OnlineEvaluator, *, since: datetime, until: datetime) -> list[WindowCounts]:
    """One :class:`WindowCounts` per window from ``since``'s to the one before
    ``until``'s (empty windows included, counts 0), oldest first: one
    aggregate query."""
    length = window_length(evaluator.window)
    rows = (
        OnlineScore.objects.filter(
            evaluator=evaluator, turn_finished_at__gte=since, turn_finished_at__lt=until
        )
        .annotate(w=_trunc(evaluator.window, "turn_finished_at"))
        .values("w")
        .annotate(
            n=Count("pk", filter=Q(passed__isnull=False)),
            k=Count("pk", filter=Q(passed=True)),
            mean=Avg("value"),
        )
    )
    found = {row["w"]: row for row in rows}
    out: list[WindowCounts] = []
    start = window_floor(since, evaluator.window)
    while start < until:
        row = found.get(start)
        out.append(WindowCounts(start, row["n"], row["k"], row["mean"]) if row else WindowCounts(start))
        start += length
    return out


def feedback_windows(evaluator: OnlineEvaluator, *, since: datetime, until: datetime) -> list[WindowCounts]:
    """End users' feedback on the chat turns in the evaluator's filters, per
    window of the turn's end (``score_windows``' windows): ``n`` current
    ratings, ``passed`` the thumbs up among them, so ``rate`` is the share of
    thumbs up with its Wilson ``interval`` (docs/monitoring.md#feedback). One
    aggregate query."""
    length = window_length(evaluator.window)
    turns = turns_matching(evaluator, finished_chat_turns()).filter(
        finished_at__gte=since, finished_at__lt=until
    )
    rows = (
        TurnFeedback.objects.filter(current=True, turn__in=turns.values("pk"))
        .annotate(w=_trunc(evaluator.window, "turn__finished_at"))
        .values("w")
        .annotate(n=Count("pk"), k=Count("pk", filter=Q(rating=FeedbackRating.UP)))
    )
    found = {row["w"]: row for row in rows}
    out: list[WindowCounts] = []
    start = window_floor(since, evaluator.window)
    while start < until:
        row = found.get(start)
        out.append(WindowCounts(start, row["n"], row["k"]) if row else WindowCounts(start))
        start += length
    return out


@dataclass
class TurnWindow:
    """The chat turns that ended in one window (within the evaluator's
    filters, not its sample): count per ``outcomes`` and latency p50/p95 (ms)."""

    start: datetime
    outcomes: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float | None:
        return percentile(sorted(self.latencies), 50) if self.latencies else None

    @property
    def p95(self) -> float | None:
        return percentile(sorted(self.latencies), 95) if self.latencies else None


def turn_windows(evaluator: OnlineEvaluator, *, since: datetime, until: datetime) -> list[TurnWindow]:
    """The windows of :func:`score_windows` for the turns themselves."""
    length = window_length(evaluator.window)
    windows: dict[datetime, TurnWindow] = {}
    start = window_floor(since, evaluator.window)
    while start < until:
        windows[start] = TurnWindow(start)
        start += length
    turns = turns_matching(evaluator, finished_chat_turns()).filter(
        finished_at__gte=since, finished_at__lt=until
    )
    for finished_at, outcome, total_ms in turns.values_list("finished_at", "outcome", "timings__total_ms"):
        w = windows.get(window_floor(finished_at, evaluator.window)) if finished_at else None
        if w is None:
            continue
        w.outcomes[outcome] = w.outcomes.get(outcome, 0) + 1
        if isinstance(total_ms, int | float) and not isinstance(total_ms, bool):
            w.latencies.append(float(total_ms))
    return list(windows.values())


def trend_data(evaluator: OnlineEvaluator, *, now: datetime, count: int | None = None) -> dict[str, Any]:
    """The trend page's figures as JSON-ready values: the last ``count``
    windows up to and including ``now``'s (default :data:`DEFAULT_WINDOWS`),
    per window its label, scored count, pass rate and Wilson interval, mean
    value, the turns' outcome counts and latency p50/p95 (ms), and the end
    users' feedback: ``rated`` turns, the thumbs-up share ``up_rate`` with
    its Wilson interval ``up_low`` / ``up_high``."""
    count = count or DEFAULT_WINDOWS[evaluator.window]
    until = window_floor(now, evaluator.window) + window_length(evaluator.window)
    since = until - count * window_length(evaluator.window)
    scores = score_windows(evaluator, since=since, until=until)
    turns = turn_windows(evaluator, since=since, until=until)
    feedback = feedback_windows(evaluator, since=since, until=until)
    fmt = "%Y-%m-%d %H:00" if evaluator.window == Window.HOURLY else "%Y-%m-%d"
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for s, t, f in zip(scores, turns, feedback, strict=True):
        seen.update(t.outcomes)
        interval, f_interval = s.interval, f.interval
        rows.append(
            {
                "label": s.start.strftime(fmt),
                "n": s.n,
                "rate": s.rate,
                "low": interval[0] if interval else None,
                "high": interval[1] if interval else None,
                "mean": s.mean,
                "turns": sum(t.outcomes.values()),
                "outcomes": dict(sorted(t.outcomes.items())),
                "p50_ms": t.p50,
                "p95_ms": t.p95,
                "rated": f.n,
                "up_rate": f.rate,
                "up_low": f_interval[0] if f_interval else None,
                "up_high": f_interval[1] if f_interval else None,
            }
        )
    return {"window": evaluator.window, "rows": rows, "outcomes": sorted(seen)}
