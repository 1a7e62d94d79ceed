"""The shared concurrency budget of an experiment's variants (``FairShare``,
and ``follow_runs``' in-flight cap on Celery), and the run-id rule."""

from __future__ import annotations

import asyncio

import pytest

from evaluation.experiments.experiment_file import run_id_of, slug
from evaluation.run.on_workers import FollowState, _rooms
from evaluation.run.plan import PlanAction, PlannedExample
from evaluation.run.sharing import FairShare


async def _run_lanes(
    share: FairShare, jobs: dict[str, tuple[int, float]]
) -> tuple[list[tuple[str, dict[int, int]]], dict[str, float]]:
    """Run ``jobs[name] = (count, seconds each)`` through one lane each: at
    every start, which lane started and the share's ``held``; and when each
    lane's last job ended (seconds)."""
    seen: list[tuple[str, dict[int, int]]] = []
    ended: dict[str, float] = {}
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def job(lane, name: str, seconds: float) -> None:
        async with lane:
            seen.append((name, share.held))
            await asyncio.sleep(seconds)
        ended[name] = loop.time() - start

    tasks = []
    for name, (count, seconds) in jobs.items():
        lane = share.lane()
        tasks += [job(lane, name, seconds) for _ in range(count)]
    await asyncio.gather(*tasks)
    return seen, ended


def test_a_slow_lane_keeps_its_share_and_does_not_starve_the_fast_one():
    share = FairShare(4)
    # lane 0 slow (0.2 s per job), lane 1 fast (0.01 s): 8 jobs each, all started at once
    seen, ended = asyncio.run(_run_lanes(share, {"slow": (8, 0.2), "fast": (8, 0.01)}))
    # the budget is split 2/2 from the start, though the slow lane's jobs came first
    assert seen[3][1] == {0: 2, 1: 2}
    # while the fast lane still has jobs to start, the slow one never holds more than its half
    last_fast = max(i for i, (name, _) in enumerate(seen) if name == "fast")
    assert max(held[0] for _, held in seen[: last_fast + 1]) == 2
    assert all(sum(held.values()) <= 4 for _, held in seen)
    # so the fast lane is done long before the slow one: 8 jobs on 2 slots ≈ 0.04 s
    assert ended["fast"] < 0.15 < ended["slow"]
    # once it is done the slow lane takes the whole budget (work-conserving)
    assert max(held[0] for _, held in seen[last_fast + 1 :]) == 4
    assert share.free == 4


def test_one_lane_alone_uses_the_whole_budget():
    share = FairShare(3)
    seen, _ = asyncio.run(_run_lanes(share, {"only": (9, 0.01)}))
    assert max(held[0] for _, held in seen) == 3
    assert share.free == 3


def test_a_cancelled_waiter_gives_its_slot_back():
    async def scenario() -> int:
        share = FairShare(1)
        lane = share.lane()
        release = asyncio.Event()

        async def holder() -> None:
            async with lane:
                await release.wait()

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        second = asyncio.create_task(holder())
        await asyncio.sleep(0)
        second.cancel()
        release.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await second
        async with lane:
            return share.free

    assert asyncio.run(scenario()) == 0


def test_capacity_below_one_is_refused():
    with pytest.raises(ValueError, match="capacity must be at least 1, got 0"):
        FairShare(0)


def _state(n: int, *, sent: int = 0) -> FollowState:
    planned = [
        PlannedExample(prediction_id=i, turn_id=i, example=None, action=PlanAction.FRESH)  # type: ignore[arg-type]
        for i in range(n)
    ]
    state = FollowState(planned)
    for i in range(sent):
        state.sent[i] = 0.0
    return state


def test_celery_in_flight_cap_is_shared_fewest_in_flight_first():
    # cap 6: run A has 4 in flight, B none; B gets the 2 free places
    assert _rooms([_state(10, sent=4), _state(10)], 6) == [0, 2]
    # all idle: 7 places over three runs with work, 3/2/2
    assert _rooms([_state(10), _state(10), _state(10)], 7) == [3, 2, 2]
    # a run with one example left takes one; the rest go to the others
    assert _rooms([_state(1), _state(10)], 6) == [1, 5]
    assert _rooms([_state(3), _state(3)], None) == [None, None]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("GPT-4o mini, review on", "gpt-4o-mini-review-on"),
        ("v1.5", "v1-5"),
        ("  Café — prompts  ", "cafe-prompts"),
        ("a/b?c#d%e", "a-b-c-d-e"),
        ("日本", ""),
    ],
)
def test_slug_rule(name, expected):
    assert slug(name) == expected


def test_run_id_is_the_two_slugs_joined_by_a_dot():
    assert run_id_of("Models A/B", "Review on") == "models-a-b.review-on"


def test_with_fewer_slots_than_lanes_every_lane_takes_its_turn():
    share = FairShare(3)
    # five lanes of four jobs each, all started at once: before any lane has
    # had its second job, every lane has had its first
    seen, _ = asyncio.run(_run_lanes(share, {f"v{i}": (4, 0.01) for i in range(5)}))
    first_five = [name for name, _ in seen[:5]]
    assert sorted(first_five) == ["v0", "v1", "v2", "v3", "v4"]
    assert share.free == 3
