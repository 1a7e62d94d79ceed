"""Turn jobs: hand a queued turn to whatever runs turns (DESIGN.md §2, §8).

``turn_enqueue(turn_id)`` is the one entry point. With ``CELERY_BROKER_URL``
set it sends ``turns.tasks.turn_run`` after the surrounding transaction
commits (``delay_on_commit``); with no broker it hands the turn, also after
the commit, to the **inline executor**: the same driver run inside this
process, so the embedded default works with one ``runserver``.

Both paths end in ``run_turn_job``, so a Celery worker and the inline executor
drive a turn identically; the driver's conditional claim makes a duplicate or
late hand-over a no-op that writes nothing.

The inline executor is a process-wide singleton, started lazily. It runs turns
as asyncio tasks on one long-lived event loop on a daemon thread of its own
(so the driver's CPU work never stalls the server's loop) and does ORM work on
its own ``DatabaseThreads`` pool. Doorbells need no care here: ``turns.events``
delivers them on its doorbell loop, which ``agentlab.startup`` points at the
server's loop when the channel layer is the in-memory one. While it runs, the
executor also sweeps stale turns every ``TURN_STALE_S / 2`` (the embedded
stand-in for Celery beat), the first time at once — that is the sweep at
server start in the embedded default.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from agentlab.agent.tools import Tool, ToolContext, ToolRegistry, default_registry
from agentlab.agent.types import Completion, LLMProvider, ProviderError
from common.db import DatabaseThreads

logger = logging.getLogger(__name__)

#: Test hook, off by default: ``AGENTLAB_TEST_TOOLS=1`` adds a ``count`` tool
#: to the registry jobs use, so an end-to-end test can count side effects in a
#: worker process it does not share memory with.
TEST_TOOLS_ENV = "AGENTLAB_TEST_TOOLS"


def turn_enqueue(turn_id: int) -> None:
    """Run turn ``turn_id`` in the background once the current transaction commits.

    Celery (``delay_on_commit``) when ``CELERY_BROKER_URL`` is set, else the
    inline executor. Outside a transaction the hand-over happens at once.
    Never runs the turn in the caller's thread.
    """
    if settings.CELERY_BROKER_URL:
        from .tasks import turn_run

        turn_run.delay_on_commit(turn_id)
        return
    # Handing over before the commit would let the driver look for a turn row
    # that is not visible yet (or is rolled back): the claim would find nothing.
    transaction.on_commit(lambda: inline_executor().submit(turn_id))


# --- local job ids: where a turn is driven, so a dead driver can be told -----------

#: ``<inline|eval>-<host>-<pid>-<n>``, cut to 40 characters by the claim, then
#: ``:<random>``; the host is shortened so the pid always survives the cut.
_LOCAL_JOB = re.compile(r"^(?:inline|eval)-(?P<host>.*)-(?P<pid>\d+)-\d+:")


@functools.cache
def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:16]


def local_job_id(kind: str, number: int) -> str:
    """The job id of the ``number``-th turn this process drives itself —
    ``kind`` ``"inline"`` (the inline executor) or ``"eval"`` (``run_eval``):
    ``<kind>-<host>-<pid>-<number>`` (``local_job_is_gone`` reads it back)."""
    if kind not in ("inline", "eval"):
        raise ValueError(f"unknown local job kind {kind!r}")
    return f"{kind}-{_host_tag()}-{os.getpid()}-{number}"


def local_job_is_gone(job_id: str) -> bool:
    """Whether ``job_id`` (a claim token, ``Turn.job_id``) belongs to a
    process of this machine that drove turns itself (the inline executor,
    ``run_eval``; see ``local_job_id``) and no longer exists.

    ``False`` when it cannot be told: a Celery task's id, a job of another
    machine, an older id without a host, or a live pid (which may be a
    reused one: such a turn is left to the heartbeat sweep). A server
    restarted after a crash thus finds its predecessor's turns at once
    instead of after ``TURN_STALE_S``.
    """
    match = _LOCAL_JOB.match(job_id or "")
    if match is None or match["host"] != _host_tag():
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False


# --- what a job runs -------------------------------------------------------------


def job_tools() -> ToolRegistry:
    """The tool registry background turns use: the built-in tools, plus the
    ``count`` test tool when ``AGENTLAB_TEST_TOOLS=1`` (see ``_testing_count_tool``)."""
    registry = default_registry()
    if os.environ.get(TEST_TOOLS_ENV) == "1":
        registry.register(_testing_count_tool())
    return registry


def _testing_count_tool() -> Tool:
    """TEST ONLY. ``count(label)`` sleeps ``AGENTLAB_TEST_COUNT_DELAY_S`` and then
    appends ``label`` as one line to ``AGENTLAB_TEST_COUNT_FILE``: a side effect
    that survives the process, written last so that a kill during the sleep
    leaves no line for a call whose result was never recorded."""
    from pydantic import BaseModel

    class CountArgs(BaseModel):
        label: str

    async def count(args: CountArgs, _ctx: ToolContext) -> str:
        await asyncio.sleep(float(os.environ.get("AGENTLAB_TEST_COUNT_DELAY_S", "0") or 0))
        path = Path(os.environ["AGENTLAB_TEST_COUNT_FILE"])
        with path.open("a", encoding="utf-8") as fh:
            fh.write(args.label + "\n")
        return f"counted {args.label}"

    return Tool(name="count", description="Count a label once (test tool).", parameters=CountArgs, fn=count)


class UnavailableProvider:
    """Stands in for a provider that could not be built (bad settings, the
    ``local`` extra missing): every call is a permanent ``ProviderError``, so
    the turn still ends with ``turn.failed`` (cause ``provider_error``) instead
    of staying queued or running forever."""

    name = "unavailable"
    native_tools = True

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> Completion:
        raise ProviderError(f"no LLM provider: {self.reason}", transient=False, kind="unavailable")

    async def aclose(self) -> None:
        return None


def make_job_provider() -> LLMProvider:
    """``turns.llm.get_provider()``, or an ``UnavailableProvider`` saying why not."""
    from .llm import get_provider

    try:
        return get_provider()
    except Exception as exc:
        logger.exception("could not build the LLM provider")
        return UnavailableProvider(f"{type(exc).__name__}: {exc}")


def _turn_kind(turn_id: int) -> str | None:
    from .models import Turn

    return Turn.objects.filter(pk=turn_id).values_list("kind", flat=True).first()


async def run_turn_job(
    turn_id: int,
    *,
    provider: LLMProvider,
    db: DatabaseThreads,
    tools: ToolRegistry | None = None,
    job_id: str = "",
) -> None:
    """Drive turn ``turn_id`` under the policy of its kind (chat or evaluation).

    Shared by the Celery task and the inline executor. Does nothing when the
    turn does not exist or is not queued (the driver's claim fails).
    """
    from .driver import CHAT, EVALUATION, drive_turn
    from .models import TurnKind

    kind = await db.run(_turn_kind, turn_id)
    if kind is None:
        logger.warning("turn job %s: no such turn", turn_id)
        return
    policy = EVALUATION if kind == TurnKind.EVALUATION else CHAT
    result = await drive_turn(
        turn_id, policy=policy, provider=provider, db=db, tools=tools or job_tools(), job_id=job_id
    )
    if result is None:
        logger.info("turn job %s: not claimed (already taken or no longer queued)", turn_id)


# --- the inline executor -------------------------------------------------------------


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
        from .services import turns_sweep

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
                aclose = getattr(self._provider, "aclose", None)
                if aclose is not None:
                    await aclose()

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
