"""Many in flight: ``run_eval`` against a slow provider at high concurrency.

The stub OpenAI-compatible server (``python -m agentlab.testing.stub_llm``)
answers every request with a ``final_answer`` tool call after a fixed latency
(1 s), so each example is one LLM call and nearly all of a turn's time is
waiting. At each concurrency c (64, 256, 1024) the script runs ``manage.py
run_eval --no-review`` on PostgreSQL over N generated examples — 4 × c, and
5,000 at c ≥ 1024 — in process and with ``--celery`` on 2 Celery worker
processes of its own (threads pool, ``c / 2 / --eval-batch`` threads each,
as ``bench/eval_throughput.py`` starts them; a warm-up run first, so that
what a worker imports with its first task is not counted), then the bare
``openai`` client alone, on its default transport and on aiohttp, at the
same concurrency against the same stub (its connection pool sized to c;
one request first, for the same reason), and prints for each:

- samples/s (as ``run_eval`` stores it: examples ÷ wall time of the drive)
  and its ratio to the ideal c ÷ latency and to the better bare client's;
- peak RSS of what holds the turns (the command in process; the workers,
  summed, on Celery) and RSS per in-flight turn: (peak − RSS when the drive
  started) ÷ c, the peak reset at that moment (``/proc/PID/clear_refs``);
  for the bare client, the same of this process per request in flight;
- peak database connections: ``pg_stat_activity`` rows of the bench
  database, polled every 20 ms for the whole command, next to the bound:
  in process ``AGENTLAB_DB_THREADS_MAX`` + the command's own 3 (its main
  thread, its run lease, its turn watcher); on Celery the command's 2 + 18
  per worker (docs/evaluating.md);
- event-loop lag p99 and max: a task on the loop that drives the turns (the
  command's in process, each worker's on Celery, the bare client's) sleeps
  10 ms again and again and records how late it wakes (``bench/scale_probe.py``
  wraps the drive from outside; no product code changes);
- CPU milliseconds per example while driving: the command's (its event loop
  thread's apart), PostgreSQL's backends', the stub's and, on Celery, the
  workers';
- whether every example got its prediction, none with an error.

The command and the workers start with a soft limit of ``--open-files``
(1024, Linux's usual default) open files, so that ``run_eval``'s own raise
of its limit is exercised. The last lines state the targets, met or not.
``BENCH_SCALE_PROFILE=PATH`` profiles each in-process drive (``bench/scale_probe.py``).

    python bench/eval_scale.py [--concurrency 64 256 1024] [--modes inprocess celery bare]
        [--latency-ms 1000] [--examples N] [--celery-workers 2] [--eval-batch 4]
        [--broker redis://127.0.0.1:6379/3]
        [--pg-url postgres://postgres@127.0.0.1:5432/agentlab_scale]

PostgreSQL's bench database is created (and migrated) if missing.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_throughput import (
    database_env,
    process_cpu_s,
    start_stub,
    start_workers,
    stop_workers,
    write_examples,
)
from scale_probe import peak_reset, sample_lag, status_kb

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "scale_probe.py"
#: an in-process command's connections beside its database threads: its main thread's,
#: its run lease's and its turn watcher's (turns/driver/lease.py)
COMMAND_CONNECTIONS = 3
#: a command following a run on Celery: its main thread's and its run lease's
FOLLOWER_CONNECTIONS = 2
#: a Celery worker process's: its shared database threads (16), its turn watcher and a task's own
WORKER_CONNECTIONS = 18
TARGET_C = 256


@dataclass
class Row:
    """One measured configuration (``mode``: in process, celery×N or a bare client)."""

    mode: str
    c: int
    n: int
    sps: float
    rss_peak_mb: float | None = None
    rss_turn_kb: float | None = None
    db_peak: int | None = None
    db_bound: int | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    complete: bool = True
    note: str = ""


class ConnectionPeak(threading.Thread):
    """Polls ``pg_stat_activity`` for the connections to the database ``url``
    names every ``every`` seconds, from the server's ``postgres`` database
    (not counted), until ``stop()``: ``peak`` is the most seen at once, and
    ``cpu_s()`` the CPU seconds their backends used (``/proc``, when the
    server runs on this machine; 0 when it cannot be read)."""

    def __init__(self, url: str, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.database = url.rsplit("/", 1)[1]
        self.admin = url.rsplit("/", 1)[0] + "/postgres"
        self.every, self.peak, self._done = every, 0, threading.Event()
        self.backends: dict[int, tuple[float, float]] = {}  # pid: (CPU first seen, CPU last seen)

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            while not self._done.wait(self.every):
                query = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
                pids = [pid for (pid,) in conn.execute(query, (self.database,))]
                self.peak = max(self.peak, len(pids))
                for pid in pids:
                    try:
                        cpu = process_cpu_s(pid)
                    except OSError:
                        continue
                    self.backends[pid] = (self.backends.get(pid, (cpu, cpu))[0], cpu)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak

    def cpu_s(self) -> float:
        return sum(last - first for first, last in self.backends.values())


@dataclass
class Command:
    """One ``run_eval`` through the probe: its metrics, the probe's record,
    the peak database connections and the CPU seconds of PostgreSQL and of
    the stub while it ran."""

    metrics: dict[str, Any]
    probe: dict[str, Any]
    db_peak: int
    pg_cpu_s: float
    stub_cpu_s: float


def open_files_soft(limit: int) -> Any:
    """A ``preexec_fn`` setting the child's soft limit on open files to ``limit`` (0: inherit)."""

    def preexec() -> None:
        if limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return preexec


def open_files_raise() -> None:
    """Raise this process's soft limit on open files to its hard limit: the
    bare client holds a socket per request in flight."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if resource.RLIM_INFINITY not in (soft, hard) and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def lag_ms(samples: list[list[float]], start: float, end: float) -> tuple[float | None, float | None]:
    """p99 and max, in ms, of the lag samples ``(time, lag s)`` taken between ``start`` and ``end``."""
    lags = [lag * 1000 for at, lag in samples if start <= at <= end]
    return percentile(lags, 99), max(lags, default=None)


def run_command(args: argparse.Namespace, env: dict[str, str], c: int, n: int, *, celery: bool) -> Command:
    """``run_eval`` at concurrency ``c`` over the ``n``-example dataset
    (written before) through the probe; exits when it fails."""
    probe, out = args.tmpdir / "probe-command.json", args.tmpdir / "out.json"
    run_id = f"scale-{'celery' if celery else 'inprocess'}-c{c}-n{n}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [
        *(sys.executable, str(PROBE), "manage", "run_eval", str(args.tmpdir / f"scale-{n}.jsonl")),
        *("--run-id", run_id, "--concurrency", str(c), "--no-review", "--json", str(out)),
        *(["--celery"] if celery else []),
    ]
    poller = ConnectionPeak(args.pg_url)
    poller.start()
    stub_cpu = process_cpu_s(args.stub_pid)
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**env, "BENCH_SCALE_PROBE": str(probe)},
        capture_output=True,
        text=True,
        preexec_fn=open_files_soft(args.open_files),
    )
    stub_cpu, db_peak = process_cpu_s(args.stub_pid) - stub_cpu, poller.stop()
    if proc.returncode != 0:
        raise SystemExit(f"run_eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    metrics, record = json.loads(out.read_text())["metrics"], json.loads(probe.read_text())
    return Command(metrics, record, db_peak, poller.cpu_s(), stub_cpu)


def complete(metrics: dict[str, Any], n: int) -> tuple[bool, str]:
    """Whether every example has its prediction, none errored; and what the metrics say."""
    ok = metrics["total"] == n and metrics["errors"] == 0 and metrics["stop_reasons"] == {"final": n}
    said = f"{metrics['total']}/{n} predictions, {metrics['errors']} errors"
    return ok, f"{said}, stop reasons {metrics['stop_reasons']}"


def measure_inprocess(args: argparse.Namespace, env: dict[str, str], c: int, n: int) -> Row:
    """``run_eval`` in process at concurrency ``c``."""
    run = run_command(args, env, c, n, celery=False)
    probe = run.probe
    ok, said = complete(run.metrics, n)
    p99, worst = lag_ms(probe["lag"], probe["start"], probe["end"])
    return Row(
        mode="in process",
        c=c,
        n=n,
        sps=run.metrics["throughput"]["samples_per_s"],
        rss_peak_mb=probe["rss_peak_kb"] / 1024,
        rss_turn_kb=(probe["rss_peak_kb"] - probe["rss_start_kb"]) / c,
        db_peak=run.db_peak,
        db_bound=args.db_threads_max + COMMAND_CONNECTIONS,
        lag_p99_ms=p99,
        lag_max_ms=worst,
        complete=ok,
        note=f"{said}\ndrive {probe['end'] - probe['start']:.1f} s; CPU ms/example: command "
        f"{probe['cpu_s'] * 1000 / n:.2f} (event loop {probe['loop_cpu_s'] * 1000 / n:.2f}, system "
        f"{probe['system_cpu_s'] * 1000 / n:.2f}), PostgreSQL {run.pg_cpu_s * 1000 / n:.2f}, stub "
        f"{run.stub_cpu_s * 1000 / n:.2f}; {probe['context_switches'] / n:.0f} context switches/example; "
        f"{probe['modules_imported']} modules first imported while driving"
        + ("" if probe.get("peak_reset") else "; peak RSS not reset (since start-up)"),
    )


def measure_celery(args: argparse.Namespace, env: dict[str, str], c: int, n: int) -> Row:
    """``run_eval --celery`` at concurrency ``c`` on ``--celery-workers`` workers of its own."""
    queue, count = f"bench-scale-{os.getpid()}-{c}", args.celery_workers
    env = {**env, "CELERY_BROKER_URL": args.broker, "AGENTLAB_EVAL_BATCH": str(args.eval_batch)}
    env["AGENTLAB_EVAL_QUEUE"] = queue
    probes = str(args.tmpdir / f"probe-worker-{c}-{{pid}}.json")
    command = (sys.executable, str(PROBE), "celery")
    workers = start_workers(
        {**env, "BENCH_SCALE_PROBE": probes}, count, c, queue, args.tmpdir, args.eval_batch, command=command
    )
    try:
        # a worker imports the agent stack with its first task: not memory of the turns measured
        warm = count * args.eval_batch
        write_examples(args.tmpdir / f"scale-{warm}.jsonl", warm)
        run_command(args, env, warm, warm, celery=True)
        for worker in workers:
            peak_reset(worker.pid)
        rss_start = sum(status_kb("VmRSS", w.pid) for w in workers)
        workers_cpu = sum(process_cpu_s(w.pid) for w in workers)
        run = run_command(args, env, c, n, celery=True)
        rss_peak = sum(status_kb("VmHWM", w.pid) for w in workers)
        workers_cpu = sum(process_cpu_s(w.pid) for w in workers) - workers_cpu
    finally:
        stop_workers(workers)
    samples = [s for w in workers for s in json.loads(Path(probes.format(pid=w.pid)).read_text())["lag"]]
    p99, worst = lag_ms(samples, run.probe["start"], run.probe["end"])
    ok, said = complete(run.metrics, n)
    return Row(
        mode=f"celery×{count}",
        c=c,
        n=n,
        sps=run.metrics["throughput"]["samples_per_s"],
        rss_peak_mb=rss_peak / 1024,
        rss_turn_kb=(rss_peak - rss_start) / c,
        db_peak=run.db_peak,
        db_bound=FOLLOWER_CONNECTIONS + count * WORKER_CONNECTIONS,
        lag_p99_ms=p99,
        lag_max_ms=worst,
        complete=ok,
        note=f"{said}\nfollowed {run.probe['end'] - run.probe['start']:.1f} s; CPU ms/example: workers "
        f"{workers_cpu * 1000 / n:.2f}, command {run.probe['cpu_s'] * 1000 / n:.2f}, PostgreSQL "
        f"{run.pg_cpu_s * 1000 / n:.2f}, stub {run.stub_cpu_s * 1000 / n:.2f}; "
        f"the command's peak RSS {run.probe['rss_peak_kb'] / 1024:.0f} MB",
    )


async def bare_client(base_url: str, n: int, c: int, *, aiohttp: bool) -> Row:
    """The bare ``openai`` async client: n requests, at most c in flight,
    its pool allowing c connections (the SDK's default is 1,000), no Django,
    no database, on the aiohttp transport or the SDK's default: samples/s,
    its loop's lag sampled as ``run_eval``'s is, and RSS per request in
    flight (this process's peak − RSS at the start, ÷ c)."""
    import httpx2
    import openai

    limits = httpx2.Limits(max_connections=c, max_keepalive_connections=c)
    http_client = (openai.DefaultAioHttpClient if aiohttp else openai.DefaultAsyncHttpxClient)(limits=limits)
    # the provider's timeout (60 s): the SDK's 5 s to connect fails a thousand connects at once here
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="bench", max_retries=0, timeout=60.0, http_client=http_client
    )
    gate = asyncio.Semaphore(c)

    async def one(i: int) -> None:
        async with gate:
            await client.chat.completions.create(
                model="stub", messages=[{"role": "user", "content": f"What is {i} + 0?"}]
            )

    await one(-1)  # what the first request imports and builds is not memory of the requests measured
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = asyncio.ensure_future(sample_lag(samples, stop))
    peak_reset()
    rss_start, cpu, started, start = status_kb("VmRSS"), time.process_time(), time.monotonic(), time.time()
    outcomes = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    errors = [repr(outcome) for outcome in outcomes if isinstance(outcome, BaseException)]
    stop.set()
    await sampler
    await client.close()
    p99, worst = lag_ms([list(sample) for sample in samples], start, time.time())
    rss_turn = (status_kb("VmHWM") - rss_start) / c
    name = "bare aiohttp" if aiohttp else "bare SDK"
    note = f"CPU ms/request {cpu * 1000 / n:.2f}" + (f"; {len(errors)} failed: {errors[0]}" if errors else "")
    return Row(
        name,
        c,
        n,
        (n - len(errors)) / elapsed,
        rss_turn_kb=rss_turn,
        lag_p99_ms=p99,
        lag_max_ms=worst,
        complete=not errors,
        note=note,
    )


def measure_bare(base_url: str, n: int, c: int, *, aiohttp: bool) -> Row:
    """``bare_client`` in a process of its own: its memory is measured from a
    fresh heap, not one an earlier measurement grew."""
    proc = subprocess.run(
        [sys.executable, __file__, "bare", base_url, str(n), str(c), "aiohttp" if aiohttp else "default"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the bare client failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return Row(**json.loads(proc.stdout))


def print_row(row: Row, latency: float) -> None:
    """One configuration as measured, on one line, and its notes on the next."""
    ideal = row.c / latency
    cells = [
        f"{row.mode:<12} c={row.c:<5} n={row.n:<5} {row.sps:7.1f}/s ({row.sps / ideal:4.0%} of {ideal:.0f}/s)"
    ]
    if row.rss_peak_mb is not None:
        cells.append(f"RSS peak {row.rss_peak_mb:.0f} MB")
    if row.rss_turn_kb is not None:
        cells.append(f"{row.rss_turn_kb:.1f} KB/turn")
    if row.db_peak is not None:
        cells.append(f"DB conns {row.db_peak} (bound {row.db_bound})")
    if row.lag_p99_ms is not None:
        cells.append(f"lag p99 {row.lag_p99_ms:.1f} ms (max {row.lag_max_ms or 0:.0f})")
    print("  ".join(cells), flush=True)
    for line in row.note.splitlines():
        print(f"{'':<14}{line}", flush=True)


def bare_best(rows: list[Row], c: int) -> float | None:
    """The better of the bare clients' samples/s at concurrency ``c``."""
    return max((r.sps for r in rows if r.mode.startswith("bare") and r.c == c), default=None)


def print_table(args: argparse.Namespace, rows: list[Row]) -> None:
    """Every configuration in one table."""
    latency = args.latency_ms / 1000
    print(f"\nstub latency {args.latency_ms} ms, one LLM call per example, PostgreSQL, --no-review")
    head = ("examples", "samples/s", "×ideal", "×bare", "peak RSS", "RSS/turn", "DB conns", "lag p99")
    print(f"{'':<14}{'c':>6}{''.join(f'{h:>11}' for h in head)}")
    for row in rows:
        best = bare_best(rows, row.c)
        cells = [
            f"{row.n}",
            f"{row.sps:.1f}",
            f"{row.sps / (row.c / latency):.2f}",
            f"{row.sps / best:.2f}" if best and not row.mode.startswith("bare") else "—",
            f"{row.rss_peak_mb:.0f} MB" if row.rss_peak_mb is not None else "—",
            f"{row.rss_turn_kb:.1f} KB" if row.rss_turn_kb is not None else "—",
            f"{row.db_peak}/{row.db_bound}" if row.db_peak is not None else "—",
            f"{row.lag_p99_ms:.1f} ms" if row.lag_p99_ms is not None else "—",
        ]
        print(f"{row.mode:<14}{row.c:>6}{''.join(f'{cell:>11}' for cell in cells)}")


def target_checks(row: Row, rows: list[Row]) -> list[tuple[str, bool]]:
    """The issue's targets for ``row``: at ``TARGET_C`` the four figures, at c ≥ 1024 completion."""
    checks: list[tuple[str, bool]] = []
    best = bare_best(rows, row.c)
    if row.c == TARGET_C:
        if best:
            checks.append(
                (f"throughput {row.sps / best:.2f}× the bare client's (≥ 0.9×)", row.sps >= 0.9 * best)
            )
        checks += [
            (f"RSS per in-flight turn {row.rss_turn_kb:.1f} KB (≤ 60 KB)", (row.rss_turn_kb or 0) <= 60),
            (
                f"database connections {row.db_peak} (≤ {row.db_bound})",
                (row.db_peak or 0) <= (row.db_bound or 0),
            ),
            (f"event-loop lag p99 {row.lag_p99_ms:.1f} ms (≤ 100 ms)", (row.lag_p99_ms or 0) <= 100),
        ]
    if row.c >= 1024:
        checks.append((f"finished: a prediction for each of {row.n} examples, no error", row.complete))
    return checks


def print_targets(rows: list[Row]) -> None:
    """The issue's targets, met or not, with their measurements."""
    print(f"\ntargets (the figures at c={TARGET_C}; at c=1024 the command finishes):")
    for row in (r for r in rows if not r.mode.startswith("bare")):
        for text, met in target_checks(row, rows):
            print(f"  {row.mode:<12} c={row.c:<5} {'met    ' if met else 'NOT met'}  {text}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    modes = ["inprocess", "celery", "bare"]
    parser.add_argument("--modes", nargs="+", default=modes, choices=modes)
    parser.add_argument("--latency-ms", type=int, default=1000)
    parser.add_argument(
        "--examples", type=int, help="examples per run (default: 4 × c, and 5,000 at c ≥ 1024)"
    )
    parser.add_argument("--celery-workers", type=int, default=2)
    parser.add_argument(
        "--eval-batch",
        type=int,
        default=4,
        help="examples per Celery message (AGENTLAB_EVAL_BATCH); the workers' threads are sized to it",
    )
    parser.add_argument(
        "--open-files",
        type=int,
        default=1024,
        help="soft limit on open files the command and the workers start with (0: inherit)",
    )
    parser.add_argument("--broker", default=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/3"))
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/agentlab_scale"),
    )
    args = parser.parse_args()
    args.db_threads_max = int(os.environ.get("AGENTLAB_DB_THREADS_MAX", "32"))
    return args


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measure(args: argparse.Namespace, env: dict[str, str], base_url: str) -> list[Row]:
    """Every concurrency and mode of ``args``, printed as measured."""
    rows: list[Row] = []
    for c in args.concurrency:
        n = args.examples or (5000 if c >= 1024 else 4 * c)
        write_examples(args.tmpdir / f"scale-{n}.jsonl", n)
        for mode in args.modes:
            if mode == "bare":
                for aiohttp in (False, True):
                    rows.append(measure_bare(base_url, n, c, aiohttp=aiohttp))
                    print_row(rows[-1], args.latency_ms / 1000)
                continue
            rows.append((measure_celery if mode == "celery" else measure_inprocess)(args, env, c, n))
            print_row(rows[-1], args.latency_ms / 1000)
    return rows


def main() -> int:
    args = parse_args()
    open_files_raise()
    print(f"before: {uptime()}", flush=True)
    started = time.monotonic()
    stub, base_url = start_stub(args.latency_ms)
    args.stub_pid = stub.pid
    try:
        with tempfile.TemporaryDirectory(prefix="agentlab-scale-") as tmp:
            args.tmpdir = Path(tmp)
            base_env = {
                k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AGENTLAB_SQLITE_PATH")
            }
            base_env.update(
                AGENTLAB_LLM_BASE_URL=base_url, AGENTLAB_LLM_API_KEY="bench", AGENTLAB_MODEL="stub"
            )
            rows = measure(args, database_env(base_env, "postgres", args, args.tmpdir), base_url)
    finally:
        stub.terminate()
        stub.wait()
    print(f"after:  {uptime()}  ({time.monotonic() - started:.0f} s in all)")
    print_table(args, rows)
    print_targets(rows)
    return 0


def bare_main(base_url: str, n: str, c: str, transport: str) -> int:
    """``eval_scale.py bare URL N C aiohttp|default``: one bare client's row as JSON (``measure_bare``)."""
    open_files_raise()
    row = asyncio.run(bare_client(base_url, int(n), int(c), aiohttp=transport == "aiohttp"))
    print(json.dumps(dataclasses.asdict(row)))
    return 0


if __name__ == "__main__":
    raise SystemExit(bare_main(*sys.argv[2:]) if sys.argv[1:2] == ["bare"] else main())
