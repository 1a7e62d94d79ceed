"""A failure while a drive begins (issue 47, item 8): a replay that raises or
extensions that cannot even be named end the turn ``failed`` with the cause,
at once, with a terminal event — not a claimed turn left for the sweeper."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentlab.agent.providers.scripted import ScriptedProvider, final
from turns.driver import EVALUATION, drive_turn
from turns.driver import drive as drive_module
from turns.models import Turn
from turns.selectors import events_after
from turns.services import turn_create

pytestmark = pytest.mark.django_db(transaction=True)


def _types(turn_id: int) -> list[str]:
    return [e.type for e in events_after(turn_id=turn_id)]


async def _failed_with(turn_id: int, db_threads, cause: str) -> None:
    turn = await db_threads.run(Turn.objects.get, pk=turn_id)
    assert (turn.status, turn.outcome, turn.stop_reason) == ("failed", "failed", "error")
    types = await db_threads.run(_types, turn_id)
    assert types[-1] == "turn.failed"
    failed = (await db_threads.run(lambda: list(events_after(turn_id=turn_id))))[-1]
    assert cause in failed.data["error"] and failed.data["cause"] == "error"


async def test_a_replay_that_fails_ends_the_turn_failed_at_once(owner, db_threads, monkeypatch):
    turn = await db_threads.run(turn_create, owner=owner, question="q")
    # ran before: started, so the claim is not fresh and the drive replays its events
    await db_threads.run(
        lambda: Turn.objects.filter(pk=turn.pk).update(started_at=timezone.now() - timedelta(minutes=1))
    )

    def broken(**kwargs):
        raise ValueError("event 3 cannot be replayed")

    monkeypatch.setattr(drive_module, "attempt_steps", broken)
    provider = ScriptedProvider([final("1")])
    result = await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db_threads)
    assert result is not None and result.status == "failed"
    assert "event 3 cannot be replayed" in (result.error or "")
    await _failed_with(turn.pk, db_threads, "event 3 cannot be replayed")
    assert provider.calls == []  # nothing asked of the model


async def test_extensions_that_raise_while_loading_end_the_turn_failed(owner, db_threads, monkeypatch):
    turn = await db_threads.run(turn_create, owner=owner, question="q")

    def exploding(recorded):
        raise RuntimeError("plugin 'boom' raised while loading")

    monkeypatch.setattr(drive_module, "recorded_extensions", exploding)
    result = await drive_turn(
        turn.pk, policy=EVALUATION, provider=ScriptedProvider([final("1")]), db=db_threads
    )
    assert result is not None and (result.status, result.stop_reason) == ("failed", "error")
    await _failed_with(turn.pk, db_threads, "plugin 'boom' raised while loading")
