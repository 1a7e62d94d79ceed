"""What ``bench/eval_scale.py`` measures inside the processes it starts,
without a change to the product code: this script runs ``manage.py …`` or
``celery …`` in its own process after wrapping the driving code, and writes
what it saw as JSON to the file named by ``BENCH_SCALE_PROBE`` (``{pid}`` in
the name: the process's id).

    BENCH_SCALE_PROBE=probe.json python bench/scale_probe.py manage run_eval DATASET …
    BENCH_SCALE_PROBE=probe-{pid}.json python bench/scale_probe.py celery -A config worker …

- ``manage``: ``evaluation.run.evaluate._drive`` (the in-process drive: one
  event loop for every turn) is wrapped to record the process's RSS when the
  drive starts, reset its peak (``/proc/self/clear_refs``) and read it when
  the drive ends, the CPU the drive cost, and to run a lag sampler on the
  drive's loop; with ``--celery``, ``_follow_on_workers`` is wrapped to
  record the window the run was driven in (its start and end, ``time.time()``).
- ``celery``: once the worker is ready, the lag sampler runs on the process's
  evaluation loop (``evaluation.run.worker._loop``, where every example task
  of the process is driven) until the worker shuts down; the samples carry
  their times, so the bench keeps those inside the run's window.

The lag sampler sleeps ``LAG_TICK_S`` (10 ms) again and again and records
how much later than asked it woke up: the time a ready callback waited
behind the others, which every turn's next step waits too.

With ``BENCH_SCALE_PROFILE=PATH`` (``manage`` only) the drive is profiled
too: ``PATH.pstats``, the loop thread's CPU by function (``cProfile`` on
``time.thread_time``), ``PATH.db.pstats``, the database threads' CPU by
function (a ``cProfile`` per thread around each call), and ``PATH.txt``,
where every thread was every 5 ms (``sys._current_frames``): the innermost
frame and the innermost frame of AgentLab's code, counted per kind of thread
(the loop, the database pool, the others). Profiling slows the drive down
several times: its figures are shares, not speeds.
"""

from __future__ import annotations

import asyncio
import collections
import cProfile
import json
import os
import pstats
import resource
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

LAG_TICK_S = 0.01


def status_kb(field: str, pid: int | str = "self") -> int:
    """A ``/proc/PID/status`` memory field (``VmRSS``, ``VmHWM``) in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_reset(pid: int | str = "self") -> bool:
    """Reset the process's peak RSS (``VmHWM``) to its current RSS (Linux ≥ 4.0);
    whether it could."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


async def sample_lag(samples: list[tuple[float, float]], stop: threading.Event) -> None:
    """Append ``(time.time(), lag s)`` every ``LAG_TICK_S`` until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        samples.append((time.time(), max(0.0, loop.time() - asked - LAG_TICK_S)))


class Profile:
    """The drive's profile (module docstring), written to ``path``'s ``.pstats``,
    ``.db.pstats`` and ``.txt``."""

    OURS = ("/agentlab/", "/common/", "/turns/", "/evaluation/")

    def __init__(self, path: str) -> None:
        self.path = path
        self.cpu = cProfile.Profile(time.thread_time)
        self.counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.stop = threading.Event()
        self.loop_ident = threading.get_ident()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.db_profiles: list[cProfile.Profile] = []

    def start(self) -> None:
        self.cpu.enable()
        self.sampler.start()
        self._profile_database_threads()

    def _profile_database_threads(self) -> None:
        """Profile every call a database thread makes (``DatabaseThreads._call``), one
        ``cProfile`` per thread on its own CPU clock; ``finish`` adds them up."""
        from common.db import DatabaseThreads

        local = threading.local()
        call = DatabaseThreads._call

        def profiled(pool: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            profile = getattr(local, "profile", None)
            if profile is None:
                profile = local.profile = cProfile.Profile(time.thread_time)
                self.db_profiles.append(profile)
            profile.enable()
            try:
                return call(pool, fn, *args, **kwargs)
            finally:
                profile.disable()

        DatabaseThreads._call = profiled  # type: ignore[method-assign,assignment]

    def _where(self, frame: Any) -> tuple[str, str]:
        leaf = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
        ours = ""
        while frame is not None and not ours:
            name = frame.f_code.co_filename
            if any(part in name for part in self.OURS) and "site-packages" not in name:
                ours = f"{name.split('/main/')[-1]}:{frame.f_code.co_name}:{frame.f_lineno}"
            frame = frame.f_back
        return leaf, ours

    def _sample(self) -> None:
        me = threading.get_ident()
        while not self.stop.wait(0.005):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, "?")
                kind = (
                    "loop" if ident == self.loop_ident else "db" if name.startswith("agentlab-db") else name
                )
                self.counts[(kind, *self._where(frame))] += 1

    def finish(self) -> None:
        self.cpu.disable()
        self.stop.set()
        self.sampler.join()
        self.cpu.dump_stats(self.path + ".pstats")
        if self.db_profiles:
            stats = pstats.Stats(self.db_profiles[0])
            for profile in self.db_profiles[1:]:
                stats.add(profile)
            stats.dump_stats(self.path + ".db.pstats")
        by_kind: dict[str, list[str]] = collections.defaultdict(list)
        totals = collections.Counter(kind for kind, _, _ in self.counts.elements())
        for (kind, leaf, ours), count in self.counts.most_common():
            if len(by_kind[kind]) < 40:
                by_kind[kind].append(f"  {count / totals[kind]:6.1%}  {leaf:<40} {ours}")
        lines = [f"{kind}: {totals[kind]} samples\n" + "\n".join(rows) for kind, rows in by_kind.items()]
        Path(self.path + ".txt").write_text("\n\n".join(lines) + "\n")


def write(record: dict[str, Any]) -> None:
    """``record`` as JSON to ``BENCH_SCALE_PROBE`` (``{pid}`` in it: this process's id)."""
    Path(os.environ["BENCH_SCALE_PROBE"].format(pid=os.getpid())).write_text(json.dumps(record))


class Meter:
    """What the process spends between ``start()`` and ``finish()``: its RSS
    at the start and its peak after (reset at the start), the CPU seconds of
    the process and of the calling thread (the event loop's), system CPU,
    context switches and the modules first imported meanwhile (memory that
    is not the turns')."""

    def start(self) -> dict[str, Any]:
        self.cpu, self.thread_cpu = time.process_time(), time.thread_time()
        self.usage, self.modules = resource.getrusage(resource.RUSAGE_SELF), len(sys.modules)
        return {"start": time.time(), "rss_start_kb": status_kb("VmRSS"), "peak_reset": peak_reset()}

    def finish(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "end": time.time(),
            "rss_peak_kb": status_kb("VmHWM"),
            "cpu_s": time.process_time() - self.cpu,
            "loop_cpu_s": time.thread_time() - self.thread_cpu,
            "system_cpu_s": usage.ru_stime - self.usage.ru_stime,
            "context_switches": usage.ru_nvcsw - self.usage.ru_nvcsw + usage.ru_nivcsw - self.usage.ru_nivcsw,
            "modules_imported": len(sys.modules) - self.modules,
        }


def wrap_drive(evaluate: Any) -> None:
    """Wrap ``evaluate._drive`` and ``evaluate._follow_on_workers`` (module docstring)."""
    drive: Callable[..., Coroutine[Any, Any, None]] = evaluate._drive
    follow: Callable[..., Any] = evaluate._follow_on_workers

    async def probed_drive(*args: Any, **kwargs: Any) -> None:
        samples: list[tuple[float, float]] = []
        stop, meter = threading.Event(), Meter()
        record = meter.start()
        sampler = asyncio.ensure_future(sample_lag(samples, stop))
        path = os.environ.get("BENCH_SCALE_PROFILE")
        profile = Profile(path) if path else None
        if profile:
            profile.start()
        try:
            await drive(*args, **kwargs)
        finally:
            stop.set()
            await sampler
            if profile:
                profile.finish()
            write({**record, **meter.finish(), "lag": samples})

    def probed_follow(*args: Any, **kwargs: Any) -> Any:
        meter = Meter()
        record = meter.start()
        try:
            return follow(*args, **kwargs)
        finally:
            write({**record, **meter.finish()})

    evaluate._drive = probed_drive
    evaluate._follow_on_workers = probed_follow


def run_manage(argv: list[str]) -> None:
    """``manage.py ARGV`` with the drive wrapped."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from evaluation.run import evaluate

    wrap_drive(evaluate)
    execute_from_command_line(["manage.py", *argv])


def run_celery(argv: list[str]) -> None:
    """``celery ARGV`` (a worker) with the lag sampler on its evaluation loop."""
    from celery.__main__ import main
    from celery.signals import worker_ready, worker_shutting_down

    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def start(**_: object) -> None:
        from evaluation.run.worker import _loop

        # LoopThread.run blocks its caller until the coroutine ends: a thread of its own
        threading.Thread(target=_loop.run, args=(sample_lag(samples, stop),), daemon=True).start()

    def finish(**_: object) -> None:
        stop.set()
        write({"lag": list(samples)})

    worker_ready.connect(start, weak=False)
    worker_shutting_down.connect(finish, weak=False)
    sys.argv = ["celery", *argv]
    main()


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if kind == "manage":
        run_manage(rest)
    elif kind == "celery":
        run_celery(rest)
    else:
        raise SystemExit(f"usage: {sys.argv[0]} manage|celery ARGS…")
