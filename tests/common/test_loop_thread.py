"""``common.loop_thread.LoopThread``: one event loop serving many caller threads."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from common.loop_thread import LoopThread


def test_coroutines_from_many_threads_run_on_one_loop_and_return_their_results() -> None:
    runner = LoopThread("test-loop")
    seen: set[int] = set()

    async def work(n: int) -> int:
        seen.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.01)
        return n * n

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda n: runner.run(work(n)), range(16)))
    assert results == [n * n for n in range(16)]
    assert len(seen) == 1  # one loop for every caller thread


def test_an_exception_comes_back_to_the_caller() -> None:
    runner = LoopThread("test-loop")

    async def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        runner.run(fail())
    # the loop survives a failed coroutine
    assert runner.run(asyncio.sleep(0, result="still running")) == "still running"


def test_keep_builds_once_per_loop() -> None:
    runner = LoopThread("test-loop")
    built: list[object] = []

    def build() -> object:
        built.append(object())
        return built[-1]

    async def kept() -> object:
        return runner.keep("thing", build)

    first = runner.run(kept())
    assert runner.run(kept()) is first
    assert len(built) == 1


def test_run_from_the_loop_thread_itself_is_refused() -> None:
    runner = LoopThread("test-loop")
    errors: list[BaseException] = []

    async def nested() -> None:
        inner = asyncio.sleep(0)
        try:
            runner.run(inner)
        except RuntimeError as exc:
            errors.append(exc)

    runner.run(nested())
    assert len(errors) == 1 and "its own loop thread" in str(errors[0])
    assert threading.current_thread().name != "test-loop"


def test_close_closes_what_is_kept_and_a_later_run_starts_a_new_loop() -> None:
    runner = LoopThread("test-loop")
    closed: list[str] = []

    class Session:
        async def aclose(self) -> None:
            closed.append("session")

    async def loop_of() -> asyncio.AbstractEventLoop:
        runner.keep("session", Session)
        return asyncio.get_running_loop()

    # the loop itself is held: an id() of a freed loop may be reused by the next
    first = runner.run(loop_of())
    runner.close()
    assert closed == ["session"] and first.is_closed()
    runner.close()  # nothing running: nothing to do
    assert runner.run(loop_of()) is not first
    runner.close()
    assert closed == ["session", "session"]
