"""One asyncio event loop per process, on a thread of its own, for callers
that are plain threads (Celery's threads pool).

A Celery worker with ``--pool threads --concurrency 16`` runs each task on one
of 16 threads. Driving each task under its own event loop (``asyncio.run``,
or a loop kept per thread) gives the process 16 loops, 16 HTTP connection
pools, and 16 threads taking turns at the GIL for work that is nearly all
waiting — per example it cost about twice the CPU of the same turn driven in
``run_eval``'s single loop (``bench/eval_throughput.py``). ``LoopThread``
runs every task's coroutine on one loop instead: the task thread submits it
(``asyncio.run_coroutine_threadsafe``) and blocks, without the GIL, until it
is done; its result or exception comes back to the task as if it had run
there. What belongs to a loop (an ``openai`` client bound to it) is kept on
the loop (``LoopThread.keep``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on a daemon thread named ``name``,
    started on the first ``run``.

    ``run(coro)`` runs ``coro`` on it and returns its result (or raises its
    exception) in the calling thread; it must not be called from the loop's
    own thread (it would wait on itself: ``RuntimeError``). A fork (prefork
    pool) gets a new loop in the child: the parent's thread does not exist
    there.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._kept: dict[str, Any] = {}

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread, self._kept = loop, thread, {}
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it (see the class docstring).
        ``KeyboardInterrupt`` or ``SystemExit`` in the waiting thread cancels it."""
        loop = self._running_loop()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(f"LoopThread.run called on its own loop thread {self.name!r}")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except (KeyboardInterrupt, SystemExit):
            future.cancel()
            raise

    def close(self) -> None:
        """Close what is kept (awaiting each one's ``aclose()``, if it has
        one, on the loop), stop the loop and wait for its thread; the next
        ``run`` starts a new one. A worker calls this at shutdown, so that
        no HTTP session is left unclosed."""
        with self._lock:
            loop, thread, kept = self._loop, self._thread, list(self._kept.values())
            self._loop, self._thread, self._kept = None, None, {}
        if loop is None or thread is None or not thread.is_alive():
            return

        async def close_kept() -> None:
            for value in kept:
                aclose = getattr(value, "aclose", None)
                if aclose is not None:
                    await aclose()

        asyncio.run_coroutine_threadsafe(close_kept(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def keep(self, key: str, build: Callable[[], T]) -> T:
        """The object kept on the current loop under ``key``, built by
        ``build()`` on first use (call it from a coroutine ``run`` runs, so
        that what binds to a loop binds to this one)."""
        with self._lock:
            if key not in self._kept:
                self._kept[key] = build()
            kept: T = self._kept[key]
            return kept
