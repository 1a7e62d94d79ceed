"""Turn jobs: the hand-over of a queued turn, and the inline executor
(docs/architecture.md#processes-embedded-and-production; docs/architecture.md#the-driver).

``turn_hand_over`` is what ``turns.services.enqueue.turn_enqueue`` hands turns to
after the commit (``TurnsConfig.ready()`` plugs it in): with
``CELERY_BROKER_URL`` set it sends ``turns.jobs.tasks.turn_run``; with no broker
it gives the turn to the **inline executor**: the same driver
(``turns.jobs.run.run_turn_job``) run inside this process, so the embedded
default works with one ``runserver``.

The inline executor is a process-wide singleton, started lazily. It runs turns
as asyncio tasks on one long-lived event loop on a daemon thread of its own
(so the driver's CPU work never stalls the server's loop) and does ORM work on
its own ``DatabaseThreads`` pool. Doorbells need no care here: ``turns.doorbell``
delivers them on its own loop, which ``config.startup`` points at the
server's loop when the channel layer is the in-memory one. While it runs, the
executor also sweeps stale turns every ``TURN_STALE_S / 2`` (the embedded
stand-in for Celery beat), the first time at once — that is the sweep at
server start in the embedded default.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings

from agentlab.agent.tools import ToolRegistry
from agentlab.agent.types import LLMProvider
from common.db import DatabaseThreads
from turns.driver.lease import turn_watcher
from turns.jobs.ids import local_job_id
from turns.jobs.run import job_tools, make_job_provider, run_turn_job
from turns.jobs.sweep import turns_sweep
from turns.jobs.tasks import turn_run

logger = logging.getLogger(__name__)


def turn_hand_over(turn_id: int) -> None:
    """Start driving turn ``turn_id`` elsewhere, now (``turn_enqueue`` calls
    this after the commit): Celery when ``CELERY_BROKER_URL`` is set, else
    the inline executor. Never runs the turn in the caller's thread."""
    if settings.CELERY_BROKER_URL:
        turn_run.delay(turn_id)
    else:
        inline_executor().submit(turn_id)


class InlineExecutor:
    """Runs turns inside this process on one event loop (see the module docstring).

    ``loop``: run on this (already running) loop; ``None`` starts a loop on a
    daemon thread. ``provider_factory`` is called once, on the loop, and the
    provider is shared by the turns of that loop (an async HTTP client belongs
    to the loop it first ran on). ``sweep_every_s`` (``None``: ``TURN_STALE_S /
    2``, at least 1 s; ``0``: never) is the period of the stale-turn sweep.
    """

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        provider_factory: Callable[[], LLMProvider] = make_job_provider,
        tools_factory: Callable[[], ToolRegistry] = job_tools,
        db_threads: int = 8,
        sweep_every_s: float | None = None,
    ) -> None:
        self._own_loop = loop is None
        self._loop = loop or asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._provider_factory = provider_factory
        self._tools_factory = tools_factory
        self._provider: LLMProvider | None = None
        self.db = DatabaseThreads(max_workers=db_threads)
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweep_every_s = sweep_every_s
        self._sweeper: concurrent.futures.Future[None] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def start(self) -> InlineExecutor:
        """Start the loop thread (if the loop is ours) and the periodic sweep."""
        if self._own_loop and self._thread is None:
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="agentlab-inline-turns", daemon=True
            )
            self._thread.start()
        every = self._sweep_every_s
        if every is None:
            every = max(1.0, float(settings.TURN_STALE_S) / 2)
        if every > 0 and self._sweeper is None:
            self._sweeper = asyncio.run_coroutine_threadsafe(self._sweep_forever(every), self._loop)
        return self

    def submit(self, turn_id: int) -> concurrent.futures.Future[None]:
        """Schedule turn ``turn_id``; thread-safe. The future resolves when the
        driver returns (or ``None`` right away if the turn was not claimable)."""
        return asyncio.run_coroutine_threadsafe(self._drive(turn_id), self._loop)

    async def _drive(self, turn_id: int) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._provider is None:
                self._provider = self._provider_factory()
            job_id = local_job_id("inline", next(self._ids))
            await run_turn_job(
                turn_id, provider=self._provider, db=self.db, tools=self._tools_factory(), job_id=job_id
            )
        except Exception:
            logger.exception("inline turn %s failed outside the driver", turn_id)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _sweep_forever(self, every: float) -> None:
        while True:
            try:
                swept = await self.db.run(turns_sweep, stale_s=float(settings.TURN_STALE_S))
                if swept.interrupted:
                    logger.warning("marked %s stale turn(s) interrupted", swept.interrupted)
            except Exception:
                logger.exception("stale-turn sweep failed")
            await asyncio.sleep(every)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the sweep and running turns (they stay ``running`` and are
        swept as interrupted later), stop our own loop, close the DB pool.
        Must not be called from the executor's loop."""

        async def cancel_all() -> None:
            pending = [t for t in self._tasks if not t.done()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            if self._provider is not None:
                await self._provider.aclose()

        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(timeout)
            except (concurrent.futures.TimeoutError, RuntimeError):
                logger.warning("inline executor: turns did not stop within %s s", timeout)
        if self._own_loop and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._thread = None
            deadline = time.monotonic() + timeout
            while self._loop.is_running() and time.monotonic() < deadline:
                time.sleep(0.01)
            self._loop.close()
        # the process's turn watcher closes its connection once our turns left it
        turn_watcher().wait_idle(min(timeout, 2.0))
        self.db.close()


_inline: InlineExecutor | None = None
_inline_lock = threading.Lock()


def inline_executor() -> InlineExecutor:
    """The process-wide inline executor, started on first use (thread-safe)."""
    global _inline
    with _inline_lock:
        if _inline is None:
            _inline = InlineExecutor().start()
        return _inline


def inline_executor_reset(executor: InlineExecutor | None = None) -> InlineExecutor | None:
    """Replace the singleton (tests: an executor with a scripted provider);
    returns the previous one, which the caller stops."""
    global _inline
    with _inline_lock:
        previous, _inline = _inline, executor
        return previous
