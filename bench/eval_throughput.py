"""Throughput of ``run_eval`` against a stub OpenAI-compatible server.

The stub (``python -m agentlab.testing.stub_llm``) answers every request with a
``final_answer`` tool call after a fixed latency, so each example is one LLM
call. For each database (SQLite, PostgreSQL), mode (``--celery-workers``: 0
drives in the ``run_eval`` process; N > 0 starts N Celery worker processes,
threads pool, ``concurrency / N / --eval-batch`` threads each — a thread
drives a message of ``--eval-batch`` examples at once — on a queue of their
own, and runs ``run_eval --celery``) and concurrency (1, 8, 32, 64) the script
runs ``manage.py run_eval`` over N generated examples and prints samples/s
(examples driven ÷ wall time of the driving phase, as stored by run_eval in
``metrics.throughput``), the ratio to the ideal (concurrency ÷ latency) and,
against the same stub, what the bare ``openai`` client does alone (no Django,
no database) — the practical ceiling of one process. Next to each figure:
the CPU milliseconds per example — of the ``run_eval`` command after its
start-up (a one-example run's CPU is subtracted) plus, on Celery, of its
workers while the run lasted; of the bare client, per request. The last
lines give the ratios the targets are stated in, from this one run.

    python bench/eval_throughput.py [--examples 500] [--latency-ms 50]
        [--concurrency 1 8 32 64] [--celery-workers 0 2] [--databases sqlite postgres]
        [--broker redis://127.0.0.1:6379/1]
        [--pg-url postgres://postgres@127.0.0.1:5432/agentlab_bench]

PostgreSQL's bench database is created (and migrated) if missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from agentlab.testing.databases import ensure_pg_database
from agentlab.testing.net import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent


def write_examples(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {
                        "question_id": f"bench-{i}",
                        "question": f"What is {i} + 0? Answer {i}.",
                        "answer": str(i),
                        "task_type": "math",
                    }
                )
                + "\n"
            )


def start_workers(
    env: dict[str, str],
    count: int,
    concurrency: int,
    queue: str,
    logs: Path,
    batch: int,
    command: Sequence[str] = (sys.executable, "-m", "celery"),
) -> list[subprocess.Popen]:
    """``count`` Celery worker processes (threads pool) sharing ``concurrency``
    turns in flight — ``concurrency / count / batch`` threads each, as each
    thread drives a message of ``batch`` examples at once — reading
    ``queue``, logging to ``logs``; returns once each is ready. ``command``:
    what runs ``celery`` (``bench/eval_scale.py`` runs it through its probe)."""
    procs = []
    for i in range(count):
        turns = max(1, concurrency // count + (1 if i < concurrency % count else 0))
        share = max(1, -(-turns // batch))
        log = logs / f"{queue}-{i}.log"
        with log.open("w") as out:
            procs.append(
                subprocess.Popen(
                    [
                        *(*command, "-A", "config", "worker", "--pool", "threads"),
                        *("--concurrency", str(share), "-Q", queue, "--hostname", f"bench{i}@{queue}"),
                        *("--without-gossip", "--without-mingle", "--loglevel", "INFO"),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + 120
    for i, proc in enumerate(procs):
        while " ready." not in (logs / f"{queue}-{i}.log").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"Celery worker {i} did not start: see {logs / f'{queue}-{i}.log'}")
            time.sleep(0.2)
    return procs


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_eval(
    env: dict[str, str],
    dataset: Path,
    run_id: str,
    concurrency: int,
    celery_workers: int,
    out: Path,
    limit: int | None = None,
) -> tuple[dict, float]:
    """``manage.py run_eval`` over ``dataset``: its metrics and the CPU
    seconds the command itself used (start-up included)."""
    # one LLM call per example, as the benchmark is defined: no review call
    cmd = [
        sys.executable,
        "manage.py",
        "run_eval",
        str(dataset),
        "--run-id",
        run_id,
        "--concurrency",
        str(concurrency),
        *(["--celery"] if celery_workers else []),
        "--no-review",
        "--json",
        str(out),
        *(["--limit", str(limit)] if limit else []),
    ]
    before = children_cpu_s()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    cpu = children_cpu_s() - before
    if proc.returncode != 0:
        raise SystemExit(f"run_eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())["metrics"], cpu


async def bare_client(
    base_url: str, n: int, concurrency: int, *, aiohttp: bool = False
) -> tuple[float, float]:
    """Samples/s and CPU ms per request of the bare ``openai`` async client: n requests, at most
    ``concurrency`` in flight, no Django, no database; with ``aiohttp``, on
    the SDK's aiohttp transport (as AgentLab's provider), else its default."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key="bench",
        max_retries=0,
        http_client=openai.DefaultAioHttpClient() if aiohttp else None,
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await client.chat.completions.create(
                model="stub", messages=[{"role": "user", "content": f"What is {i} + 0?"}]
            )

    started, cpu = time.monotonic(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    await client.close()
    return n / elapsed, cpu * 1000 / n


#: one measured configuration: (name, concurrency, samples/s, CPU ms per example)
Row = tuple[str, int, float, float]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument(
        "--celery-workers",
        type=int,
        nargs="+",
        default=[0, 2],
        help="0: in process; N: run_eval --celery with N worker processes (each concurrency "
        "below N is skipped)",
    )
    parser.add_argument(
        "--eval-batch",
        type=int,
        default=4,
        help="examples per Celery message (AGENTLAB_EVAL_BATCH); the workers' threads are sized to it",
    )
    parser.add_argument("--broker", default=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/1"))
    parser.add_argument(
        "--databases", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"]
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/agentlab_bench"),
    )
    return parser.parse_args()


def start_stub(latency_ms: int) -> tuple[subprocess.Popen, str]:
    """The stub LLM server on a free port, answering after ``latency_ms``;
    returns the process and its OpenAI-compatible base URL."""
    port = free_port()
    stub = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentlab.testing.stub_llm",
            "--port",
            str(port),
            "--latency-ms",
            str(latency_ms),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, timeout=10, process=stub, what="the stub LLM server")
    return stub, f"http://127.0.0.1:{port}/v1"


def database_env(base_env: dict[str, str], db: str, args: argparse.Namespace, tmpdir: Path) -> dict[str, str]:
    """The environment of the commands on database ``db`` (``sqlite`` or
    ``postgres``), migrated."""
    env = dict(base_env)
    if db == "sqlite":
        env["AGENTLAB_SQLITE_PATH"] = str(tmpdir / "bench.sqlite3")
    else:
        ensure_pg_database(args.pg_url)
        env["DATABASE_URL"] = args.pg_url
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return env


def measure_one(
    args: argparse.Namespace, env: dict[str, str], *, db: str, workers: int, c: int, run: str, tmpdir: Path
) -> tuple[float, float, float]:
    """One ``run_eval`` at concurrency ``c`` (on ``workers`` Celery workers,
    0: in process): samples/s, the command's CPU seconds and its workers'."""
    queue = f"bench-{db}-{os.getpid()}-{c}"
    procs = start_workers(env, workers, c, queue, tmpdir, args.eval_batch) if workers else []
    try:
        workers_cpu = sum(process_cpu_s(proc.pid) for proc in procs)
        metrics, command_cpu = run_eval(
            {**env, "AGENTLAB_EVAL_QUEUE": queue}, args.dataset, run, c, workers, tmpdir / "out.json"
        )
        workers_cpu = sum(process_cpu_s(proc.pid) for proc in procs) - workers_cpu
    finally:
        stop_workers(procs)
    assert metrics["total"] == args.examples and metrics["correct"] == args.examples, metrics
    return metrics["throughput"]["samples_per_s"], command_cpu, workers_cpu


def measure_database(args: argparse.Namespace, env: dict[str, str], db: str, tmpdir: Path) -> list[Row]:
    """Every mode and concurrency of ``args`` on database ``db``, printed as measured."""
    rows: list[Row] = []
    latency = args.latency_ms / 1000
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # the command's own start-up and finish, to leave out of the per-example CPU
    _, startup_cpu = run_eval(
        env, args.dataset, f"bench-{db}-startup-{stamp}", 1, 0, tmpdir / "o.json", limit=1
    )
    for workers in args.celery_workers:
        name = db if not workers else f"{db} celery×{workers}"
        if workers:
            env = {**env, "CELERY_BROKER_URL": args.broker, "AGENTLAB_EVAL_BATCH": str(args.eval_batch)}
        for c in (c for c in args.concurrency if c >= workers):
            run = f"bench-{db}-w{workers}-c{c}-{stamp}"
            sps, command_cpu, workers_cpu = measure_one(
                args, env, db=db, workers=workers, c=c, run=run, tmpdir=tmpdir
            )
            cpu_ms = (command_cpu - startup_cpu + workers_cpu) * 1000 / (args.examples - 1)
            rows.append((name, c, sps, cpu_ms))
            print(
                f"{name:<12} concurrency {c:>3}: {sps:7.1f} samples/s  "
                f"({sps / (c / latency):5.1%} of ideal {c / latency:.0f}/s)  "
                f"{cpu_ms:5.2f} ms CPU/example"
                + (f" ({workers_cpu * 1000 / args.examples:.2f} in workers)" if workers else ""),
                flush=True,
            )
    return rows


def measure_bare(args: argparse.Namespace, base_url: str) -> list[Row]:
    """The bare ``openai`` client, on its default transport and on aiohttp, at every concurrency."""
    rows: list[Row] = []
    latency = args.latency_ms / 1000
    for name, aiohttp in (("bare SDK", False), ("bare aiohttp", True)):
        for c in args.concurrency:
            sps, cpu_ms = asyncio.run(bare_client(base_url, args.examples, c, aiohttp=aiohttp))
            rows.append((name, c, sps, cpu_ms))
            print(
                f"{name:<12} concurrency {c:>3}: {sps:7.1f} samples/s  ({sps / (c / latency):5.1%} "
                f"of ideal)  {cpu_ms:5.2f} ms CPU/request",
                flush=True,
            )
    return rows


def print_table(args: argparse.Namespace, rows: list[Row]) -> None:
    """Samples/s and CPU per example of every configuration, one line per name."""
    print()
    print(f"{args.examples} examples, stub latency {args.latency_ms} ms, one LLM call per example")
    print("samples/s (CPU ms per example: the command after its start-up, plus its Celery workers)")
    print(f"{'':<18}" + "".join(f"{'c=' + str(c):>20}" for c in args.concurrency))
    for name in dict.fromkeys(db for db, *_ in rows):
        cells = {c: (sps, cpu) for db, c, sps, cpu in rows if db == name}
        print(
            f"{name:<18}"
            + "".join(
                f"{cells[c][0]:>10.1f}/s ({cells[c][1]:4.2f} ms)" if c in cells else f"{'—':>20}"
                for c in args.concurrency
            )
        )


def print_ratios(args: argparse.Namespace, rows: list[Row]) -> None:
    """The ratios the targets are stated in, from this one run."""
    print()
    print("ratios in this run (same stub, same machine):")
    by = {(name, c): sps for name, c, sps, _ in rows}
    for c in args.concurrency:
        for db in args.databases:
            for bare in ("bare SDK", "bare aiohttp"):
                if (db, c) in by and (bare, c) in by:
                    print(f"  c={c:<3} {db} in process / {bare}: {by[db, c] / by[bare, c]:.2f}×")
            for workers in args.celery_workers:
                name = f"{db} celery×{workers}"
                if workers and (name, c) in by and (db, c) in by:
                    print(f"  c={c:<3} {name} / {db} in process: {by[name, c] / by[db, c]:.2f}×")
    for db in args.databases:
        if (db, 32) in by and (db, 64) in by:
            print(f"  {db} in process c=64 / c=32: {by[db, 64] / by[db, 32]:.2f}×")


def main() -> int:
    args = parse_args()
    stub, base_url = start_stub(args.latency_ms)
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="agentlab-bench-") as tmp:
            tmpdir = Path(tmp)
            # one dataset per size: a dataset name holds one set of examples
            args.dataset = tmpdir / f"bench-{args.examples}.jsonl"
            write_examples(args.dataset, args.examples)
            base_env = {
                k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AGENTLAB_SQLITE_PATH")
            }
            base_env.update(
                AGENTLAB_LLM_BASE_URL=base_url, AGENTLAB_LLM_API_KEY="bench", AGENTLAB_MODEL="stub"
            )
            for db in args.databases:
                rows += measure_database(args, database_env(base_env, db, args, tmpdir), db, tmpdir)
            rows += measure_bare(args, base_url)
    finally:
        stub.terminate()
        stub.wait()
    print_table(args, rows)
    print_ratios(args, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
