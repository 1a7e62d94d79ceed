"""Which recorded turns a replay drives again (docs/evaluating.md#replaying-recorded-turns):
a run's predictions (``--run RUN``) or finished chat turns chosen by the turn
list's filters (``--turns``: the owner's group, a date range, the outcome, a
tool used), either optionally a seeded sample (``common.sampling``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import Group
from django.db.models import Exists, OuterRef, QuerySet

from common.errors import BadInput
from common.moments import parse_moment
from common.sampling import seeded_sample
from evaluation.models import Prediction, Run
from turns.models import EventType, Turn, TurnEvent, TurnKind, TurnOutcome, TurnStatus

#: the statuses of a finished turn: the ones a replay takes
FINISHED = (TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED)


@dataclass(frozen=True)
class Original:
    """One recorded turn to replay: its turn id and, from a run, its prediction's id."""

    turn_id: int
    prediction_id: int | None = None


@dataclass(frozen=True)
class TurnFilters:
    """``--turns``'s filters, each ``None`` when not given: the owner in
    ``group`` (its name), created at or after ``since`` and before
    ``until``, its ``outcome``, a ``tool.call`` of ``tool``."""

    group: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    outcome: str | None = None
    tool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The filters as ``Replay.selection`` keeps them (moments in ISO 8601)."""
        return {
            key: value.isoformat() if isinstance(value, datetime) else value
            for key, value in asdict(self).items()
            if value is not None
        }


def _moment(text: str | None, *, option: str) -> datetime | None:
    """``common.moments.parse_moment`` of ``text`` (``None`` stays ``None``),
    its error a ``BadInput`` (exit 2)."""
    try:
        return None if text is None else parse_moment(text, option=option)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def turn_filters(
    *, group: str | None, since: str | None, until: str | None, outcome: str | None, tool: str | None
) -> TurnFilters:
    """``--turns``'s options checked: a group that exists, moments that parse
    with ``since`` before ``until``, an outcome of ``TurnOutcome``, a
    non-blank tool name. Raises ``BadInput`` naming the option."""
    if group is not None and not Group.objects.filter(name=group).exists():
        raise BadInput(f"--group {group!r}: no such group")
    start, end = _moment(since, option="--since"), _moment(until, option="--until")
    if start is not None and end is not None and start >= end:
        raise BadInput(f"--since {since} is not before --until {until}")
    if outcome is not None and outcome not in TurnOutcome.values:
        raise BadInput(f"--outcome {outcome!r}: expected one of {', '.join(TurnOutcome.values)}")
    if tool is not None and not tool.strip():
        raise BadInput("--tool is blank: give a tool's name")
    return TurnFilters(group=group, since=start, until=end, outcome=outcome, tool=tool)


def chat_turns(filters: TurnFilters) -> QuerySet[Turn]:
    """The finished chat turns ``filters`` select, oldest first (one query):
    the users' traffic — a side-by-side page's turns (staff trying variants,
    ``agent_options["variant"]`` set) are left out, as online evaluation
    leaves them out."""
    turns = Turn.objects.filter(kind=TurnKind.CHAT, status__in=FINISHED).exclude(
        agent_options__has_key="variant"
    )
    if filters.group is not None:
        turns = turns.filter(owner__groups__name=filters.group)
    if filters.since is not None:
        turns = turns.filter(created_at__gte=filters.since)
    if filters.until is not None:
        turns = turns.filter(created_at__lt=filters.until)
    if filters.outcome is not None:
        turns = turns.filter(outcome=filters.outcome)
    if filters.tool is not None:
        called = TurnEvent.objects.filter(
            turn_id=OuterRef("pk"), type=EventType.TOOL_CALL, data__call__name=filters.tool
        )
        turns = turns.filter(Exists(called))
    return turns.order_by("created_at", "pk").distinct()


def run_originals(run_id: str) -> tuple[Run, list[Original]]:
    """Run ``run_id`` and its completed predictions' turns, in the run's
    order. ``BadInput`` for a run that does not exist."""
    run = Run.objects.filter(run_id=run_id).first()
    if run is None:
        raise BadInput(f"--run {run_id!r}: no such run")
    rows = (
        Prediction.objects.filter(run=run, turn__isnull=False, completed_at__isnull=False)
        .order_by("example__position", "example_id", "epoch")
        .values_list("turn_id", "pk")
    )
    return run, [Original(turn_id=turn_id, prediction_id=pk) for turn_id, pk in rows]


def sampled(originals: list[Original], *, sample: int | None, seed: int | None) -> list[Original]:
    """``sample`` of ``originals`` drawn with ``seed`` (``seeded_sample``), or all of them."""
    return originals if sample is None else seeded_sample(originals, sample, seed)
