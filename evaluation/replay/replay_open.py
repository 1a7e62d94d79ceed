"""Starting or resuming a replay: its row, its system user, one new turn of
kind ``replay`` per recorded turn and the item that pairs them
(docs/evaluating.md#replaying-recorded-turns).

Everything a new replay writes is written in one transaction, after every
check has passed: a bad option, an unknown run or a variant file with an
unknown key write nothing, and neither does a selection of no turn (the
command then says so and exits 0). The same ``--name`` again resumes the
replay: its items not completed yet are driven (a turn cut off by a kill is
interrupted and resumed from its log), the others are left as they are.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from common.errors import BadInput
from evaluation.models import Replay, ReplayItem
from evaluation.replay.selection import Original, TurnFilters, chat_turns, run_originals, sampled
from evaluation.replay.variant import ReplayVariant
from evaluation.scoring.trajectory_spec import ARGS_MODES
from turns.models import Turn, TurnKind, TurnStatus
from turns.services import turn_interrupt, turn_resume
from turns.services.turns import NewTurn, turn_create_many


@dataclass(frozen=True)
class ReplayRequest:
    """``replay_turns``'s options, checked: the replay's ``name`` (``None``:
    a new one), the recorded turns (``run_id``, or chat turns by
    ``filters``; ``sample`` of them drawn with ``seed``), the ``variant``,
    the argument rule (``args_match``, the trajectory scorers' modes), and
    whether turns go on ``live`` with read-only tools after their divergence."""

    variant: ReplayVariant
    name: str | None = None
    run_id: str | None = None
    filters: TurnFilters | None = None
    sample: int | None = None
    seed: int | None = None
    args_match: str = "exact"
    live: bool = False

    def selection(self) -> dict[str, Any]:
        """What ``Replay.selection`` keeps: the run or the filters, the sample and seed."""
        chosen: dict[str, Any] = (
            {"run": self.run_id}
            if self.run_id is not None
            else {"turns": (self.filters or TurnFilters()).to_dict()}
        )
        return {**chosen, "sample": self.sample, "seed": self.seed}


def request_check(request: ReplayRequest) -> None:
    """``BadInput`` for options that do not go together: ``--run`` and
    ``--turns`` both or neither, a ``--sample`` below 1, a ``--seed``
    without ``--sample``, an unknown ``--args-match``, a blank ``--name``."""
    if (request.run_id is None) == (request.filters is None):
        raise BadInput("give --run RUN or --turns (with its filters), one of them")
    if request.sample is not None and request.sample < 1:
        raise BadInput(f"--sample must be at least 1, got {request.sample}")
    if request.seed is not None and request.sample is None:
        raise BadInput("--seed goes with --sample")
    if request.args_match not in ARGS_MODES:
        raise BadInput(f"--args-match {request.args_match!r}: expected one of {', '.join(ARGS_MODES)}")
    if request.name is not None and not request.name.strip():
        raise BadInput("--name is blank")


@dataclass(frozen=True)
class PlannedItem:
    """An item still to drive (``drive``) or only to complete (its turn had ended)."""

    item_id: int
    turn_id: int
    original_id: int
    drive: bool


@dataclass(frozen=True)
class OpenReplay:
    """A started or resumed replay and what it still has to do."""

    replay: Replay
    planned: list[PlannedItem]
    resumed: bool


def replay_open(request: ReplayRequest) -> OpenReplay | None:
    """Start the replay ``request`` asks for, or resume the one of that
    name; ``None`` when the selection holds no turn (nothing written).
    Raises ``BadInput`` (nothing written): an option (``request_check``),
    an unknown run, a replay of that name started with other options."""
    request_check(request)
    existing = Replay.objects.filter(name=request.name).first() if request.name else None
    if existing is not None:
        _same_options(existing, request)
        return OpenReplay(replay=existing, planned=replay_resume_plan(existing), resumed=True)
    source_run = None
    if request.run_id is not None:
        source_run, originals = run_originals(request.run_id)
    else:
        originals = [
            Original(turn_id=pk)
            for pk in chat_turns(request.filters or TurnFilters()).values_list("pk", flat=True)
        ]
    originals = sampled(originals, sample=request.sample, seed=request.seed)
    if not originals:
        return None
    name = request.name or f"replay-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    with transaction.atomic():
        replay = Replay.objects.create(
            name=name,
            source_run=source_run,
            selection=request.selection(),
            variant=request.variant.options,
            args_match=request.args_match,
            live=request.live,
            system_user=_system_user(name),
        )
        items = _items_create(replay, originals, request.variant)
    planned = [
        PlannedItem(item_id=i.pk, turn_id=i.turn_id, original_id=i.original_id, drive=True) for i in items
    ]
    return OpenReplay(replay=replay, planned=planned, resumed=False)


def _same_options(replay: Replay, request: ReplayRequest) -> None:
    """A resumed replay runs with the options it started with."""
    given = {
        "selection": request.selection(),
        "variant": request.variant.options,
        "args_match": request.args_match,
        "live": request.live,
    }
    stored = {
        "selection": replay.selection,
        "variant": replay.variant,
        "args_match": replay.args_match,
        "live": replay.live,
    }
    changed = [key for key in given if given[key] != stored[key]]
    if changed:
        raise BadInput(
            f"replay {replay.name!r} was started with another {', '.join(changed)}: give the same options "
            "to resume it, or a new --name"
        )


def _system_user(name: str) -> Any:
    """The replay's system user, owner of its turns (inactive, no password)."""
    user = get_user_model()(username=f"replay-{secrets.token_hex(4)}-{name}"[:150], is_active=False)
    user.set_unusable_password()
    user.save()
    return user


def _items_create(replay: Replay, originals: list[Original], variant: ReplayVariant) -> list[ReplayItem]:
    """The new turns (kind ``replay``, linked to their originals) and the items."""
    assert replay.system_user is not None  # made with the replay
    by_id = Turn.objects.in_bulk([o.turn_id for o in originals])
    new_turns = [
        NewTurn(
            question=by_id[o.turn_id].question,
            context=dict(by_id[o.turn_id].context or {}),
            max_steps=variant.max_steps or by_id[o.turn_id].max_steps,
            model=str(variant.options.get("model") or ""),
            max_output_tokens=variant.options.get("max_output_tokens") or by_id[o.turn_id].max_output_tokens,
            agent_options=variant.agent_options(by_id[o.turn_id].agent_options or {}),
            replay_of_id=o.turn_id,
        )
        for o in originals
    ]
    created = turn_create_many(owner=replay.system_user, turns=new_turns, kind=TurnKind.REPLAY)
    return ReplayItem.objects.bulk_create(
        [
            ReplayItem(
                replay=replay,
                position=position,
                original_id=original.turn_id,
                turn=turn,
                original_prediction_id=original.prediction_id,
            )
            for position, (original, turn) in enumerate(zip(originals, created, strict=True), start=1)
        ]
    )


def replay_resume_plan(replay: Replay) -> list[PlannedItem]:
    """The items of ``replay`` not completed, their turns made drivable: a
    turn cut off while running (its process killed) is interrupted, then it
    and an interrupted one are resumed (``turn_resume``: the driver goes on
    from its log, serving nothing twice and running nothing twice); a turn
    that ended is only completed. Not one transaction: each turn's change is
    its own, and a second resume finds them as this one left them."""
    planned = []
    pending = replay.items.filter(completed_at__isnull=True).select_related("turn").order_by("position")
    for item in pending:
        turn = item.turn
        if turn.status in (TurnStatus.RUNNING, TurnStatus.WAITING):
            turn_interrupt(turn_id=turn.pk, reason="replay_turns resumed the replay")
            turn.refresh_from_db(fields=["status"])
        if turn.status == TurnStatus.INTERRUPTED:
            turn_resume(turn_id=turn.pk)
            turn.status = TurnStatus.QUEUED
        drive = turn.status == TurnStatus.QUEUED
        planned.append(
            PlannedItem(item_id=item.pk, turn_id=turn.pk, original_id=item.original_id, drive=drive)
        )
    return planned
