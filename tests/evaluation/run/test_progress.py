"""``run_eval``'s progress without a terminal (a plain line every few seconds),
and the checks of its ``--celery`` options."""

from __future__ import annotations

import io
from typing import Any

import pytest

from evaluation.run.progress import PlainProgress, progress_for
from evaluation.run.request import eval_request
from tests.redis_support import BROKER_URL


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_plain_line_at_most_every_few_seconds_and_one_at_the_end():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress("nightly", 8, stream=out, every_s=5.0, clock=clock)
    clock.now += 1
    bar.update()  # 1 s in: too soon
    assert out.getvalue() == ""
    clock.now += 4
    bar.update(3)  # 5 s in
    clock.now += 1
    bar.update()  # 6 s in: too soon again
    clock.now += 2
    bar.close()
    bar.close()  # once
    assert out.getvalue().splitlines() == [
        "run nightly: 4/8 examples done (50 %), 5 s, 0.80 ex/s",
        "run nightly: 5/8 examples done (62 %), 8 s, 0.62 ex/s",
    ]


def test_a_line_comes_every_few_seconds_while_no_example_finishes_saying_what_is_in_flight():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress("slow", 20, stream=out, every_s=10.0, clock=clock)
    for key in ("a", "b", "c"):
        bar.begin(key)
        clock.now += 1
    bar.end("a")
    bar.update(1)  # 3 s in: too soon
    clock.now += 119
    bar.update(0)  # a tick, nothing finished: the line is due all the same
    clock.now += 5
    bar.update(0)  # too soon after it
    clock.now += 5
    bar.end("b")
    bar.end("c")
    bar.update(2)
    assert out.getvalue().splitlines() == [
        "run slow: 1/20 examples done (5 %), 122 s, 0.01 ex/s, 2 in flight, oldest 121 s",
        "run slow: 3/20 examples done (15 %), 132 s, 0.02 ex/s",
    ]


def test_run_eval_without_a_terminal_ticks_while_an_example_runs(settings, monkeypatch):
    """The in-process drive ticks the bars once a second (``evaluate._tick``)."""
    import asyncio

    from evaluation.run import evaluate

    ticks: list[int] = []

    class Bar:
        def update(self, n: int = 1) -> None:
            ticks.append(n)

        def close(self) -> None: ...

    async def three_seconds() -> None:
        task = asyncio.create_task(evaluate._tick([evaluate.Tally(Bar())]))
        await asyncio.sleep(2.5)
        task.cancel()

    asyncio.run(three_seconds())
    assert ticks == [0, 0]


def test_the_last_line_is_not_written_twice_and_the_run_id_is_quoted():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress("ctrl c 2", 2, stream=out, every_s=5.0, clock=clock)
    clock.now += 6
    bar.update(2)  # the last example, and a line is due
    bar.close()  # the same count: nothing more
    assert out.getvalue().splitlines() == ["run 'ctrl c 2': 2/2 examples done (100 %), 6 s, 0.33 ex/s"]


def test_a_terminal_gets_a_bar_and_a_file_the_plain_lines():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress_for(io.StringIO(), every_s=1.0)("r", 3), PlainProgress)
    bar = progress_for(Terminal(), every_s=1.0)("r", 3)
    assert not isinstance(bar, PlainProgress) and type(bar).__name__ == "tqdm"
    bar.close()


def test_celery_options_are_checked_before_anything_runs(settings):
    settings.CELERY_BROKER_URL = BROKER_URL
    settings.AGENTLAB_EVAL_QUEUE = "nightly"
    assert eval_request(dataset="demo", celery=True).queue == "nightly"
    assert eval_request(dataset="demo", celery=True, queue=" big ", max_in_flight=3).queue == "big"
    assert eval_request(dataset="demo").queue == ""
    cases: list[tuple[dict[str, Any], str]] = [
        ({"celery": True, "max_in_flight": 0}, "--max-in-flight must be at least 1, got 0"),
        ({"celery": True, "queue": " "}, "--queue must name a queue"),
        (
            {"celery": True, "queue": "a b"},
            "--queue must be one queue name, without spaces or commas, got 'a b'",
        ),
        ({"celery": True, "queue": "a,b"}, "without spaces or commas, got 'a,b'"),
        ({"celery": True, "mcp": ["calc=http://x/mcp"]}, "--mcp cannot be used with --celery"),
        ({"queue": "q"}, "--queue goes with --celery"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            eval_request(dataset="demo", **kwargs)
    settings.CELERY_BROKER_URL = ""
    with pytest.raises(ValueError, match="--celery needs a broker"):
        eval_request(dataset="demo", celery=True)


def test_a_line_is_written_when_due_even_if_nothing_finished():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress("slow", 2, stream=out, every_s=5.0, clock=clock)
    clock.now += 6
    bar.update(0)  # run_eval --celery calls this after every look at the run
    assert out.getvalue() == "run slow: 0/2 examples done (0 %), 6 s, 0.00 ex/s\n"
