"""How long a ``manage.py`` command takes to start: CPU seconds and what it imports.

Runs each command ``--runs`` times (default 5) in a fresh interpreter and
prints the CPU time each run took (user + system, of the child process, as
``/usr/bin/time -f %U+%S`` gives it) and their median; then, from one more
run under ``python -X importtime``, the ten imports with the largest
cumulative time (microseconds, wall clock: a module and everything it
imported first).

    python bench/startup.py                    # manage.py help, manage.py compare_runs --help
    python bench/startup.py --runs 9 --top 20 -- check

``--root`` runs another checkout's ``manage.py`` (e.g. a copy before a change)
with this interpreter. Nothing touches the database: ``help`` and ``--help``
do not connect.

``--run-eval N`` measures a whole ``run_eval`` instead: N generated examples
against the bundled stub (``agentlab.testing.stub_llm``, 50 ms a reply, one
LLM call an example), ``--no-review --concurrency 8``, on a fresh SQLite
database migrated first, each run a new run id; the CPU of the whole process
(start-up, the dataset, the drive, the report), median of ``--runs``. Beside
it, the floor: a fresh interpreter that imports the ``openai`` SDK and sends
the same N requests with its async client on the aiohttp transport at the
same concurrency, with no Django and no database. With ``--base ROOT`` the
two checkouts alternate, run by run, so both see the same machine.

    python bench/startup.py --run-eval 50 [--base /path/to/older/checkout]

Bytecode is written (``PYTHONDONTWRITEBYTECODE`` is dropped from the
children's environment) and one unmeasured run warms it: what a user's
second command costs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COMMANDS = (["help"], ["compare_runs", "--help"])


def cpu_seconds(root: Path, args: list[str], env: dict[str, str] | None = None) -> float:
    """User + system CPU seconds of one ``manage.py ARGS`` run in ``root``
    (``args[0]`` a path: that script instead of ``manage.py``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    script = [] if args and args[0].endswith(".py") else ["manage.py"]
    subprocess.run(
        [sys.executable, *script, *args],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def top_imports(root: Path, args: list[str], top: int) -> list[tuple[int, str]]:
    """The ``top`` imports of ``manage.py ARGS`` by cumulative microseconds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "manage.py", *args],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            _, cumulative, name = line.split("|")
            rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:top]


#: The floor of ``--run-eval``: the same requests from the bare SDK (argv: base URL, count, concurrency).
BARE_CLIENT = """
import asyncio, sys
import openai

async def main(base_url, n, concurrency):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0,
                                http_client=openai.DefaultAioHttpClient())
    gate = asyncio.Semaphore(concurrency)
    async def one(i):
        async with gate:
            await client.chat.completions.create(
                model="stub", messages=[{"role": "user", "content": f"What is {i} + 0? Answer {i}."}])
    await asyncio.gather(*(one(i) for i in range(n)))
    await client.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def run_eval_cpu(roots: dict[str, Path], examples: int, runs: int) -> dict[str, list[float]]:
    """CPU seconds of ``runs`` whole ``run_eval`` commands of ``examples``
    examples per checkout in ``roots`` (alternating), and of the bare
    client's script (``"bare SDK"``), against one stub."""
    from eval_throughput import start_stub, write_examples

    stub, base_url = start_stub(50)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmpdir = Path(tmp)
            dataset = tmpdir / "examples.jsonl"
            write_examples(dataset, examples)
            bare = tmpdir / "bare_client.py"
            bare.write_text(BARE_CLIENT, encoding="utf-8")
            dropped = ("DATABASE_URL", "PYTHONDONTWRITEBYTECODE")
            env = {k: v for k, v in os.environ.items() if k not in dropped}
            env.update(AGENTLAB_LLM_BASE_URL=base_url, AGENTLAB_LLM_API_KEY="bench", AGENTLAB_MODEL="stub")
            envs: dict[str, dict[str, str]] = {}
            for label, root in roots.items():
                envs[label] = dict(env, AGENTLAB_SQLITE_PATH=str(tmpdir / f"{len(envs)}.sqlite3"))
                subprocess.run(
                    [sys.executable, "manage.py", "migrate", "--noinput"],
                    cwd=root,
                    env=envs[label],
                    check=True,
                    capture_output=True,
                )
            cpu: dict[str, list[float]] = {label: [] for label in [*roots, "bare SDK"]}
            bare_args = [str(bare), base_url, str(examples), "8"]
            for n in range(runs + 1):  # the first round warms the bytecode and the stub
                for label, root in roots.items():
                    args = ["run_eval", str(dataset), "--run-id", f"startup-{n}", "--no-review"]
                    seconds = cpu_seconds(root, [*args, "--concurrency", "8"], envs[label])
                    if n:
                        cpu[label].append(seconds)
                seconds = cpu_seconds(ROOT, bare_args, env)
                if n:
                    cpu["bare SDK"].append(seconds)
            return cpu
    finally:
        stub.terminate()
        stub.wait()


def print_run_eval(cpu: dict[str, list[float]], examples: int) -> None:
    """The ``--run-eval`` table: each row's runs, median and ratio to the floor."""
    floor = statistics.median(cpu["bare SDK"])
    print(f"run_eval of {examples} examples (stub 50 ms, --no-review, --concurrency 8, SQLite): CPU s")
    for label, runs in cpu.items():
        median = statistics.median(runs)
        figures = " ".join(f"{seconds:.2f}" for seconds in sorted(runs))
        print(f"  {label:<12} {figures}  median {median:.2f}  ×{median / floor:.2f} the bare SDK's")
    print(json.dumps({label: statistics.median(runs) for label, runs in cpu.items()}))


def main() -> None:
    """Parse the options and print each command's figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--top", type=int, default=10, help="imports to list (default 10)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose manage.py runs")
    parser.add_argument("--run-eval", type=int, metavar="N", help="measure a whole run_eval of N examples")
    parser.add_argument(
        "--base", type=Path, help="with --run-eval: an older checkout, run in turn with --root"
    )
    parser.add_argument("command", nargs="*", help="one command and its arguments (default: two)")
    options = parser.parse_args()
    if options.run_eval:
        roots = {"run_eval": options.root}
        if options.base:
            roots = {"run_eval base": options.base, "run_eval head": options.root}
        print_run_eval(run_eval_cpu(roots, options.run_eval, options.runs), options.run_eval)
        return
    commands = [options.command] if options.command else [list(c) for c in DEFAULT_COMMANDS]
    for args in commands:
        runs = [cpu_seconds(options.root, args) for _ in range(options.runs)]
        figures = " ".join(f"{seconds:.2f}" for seconds in sorted(runs))
        print(f"manage.py {' '.join(args)}: CPU {figures} s, median {statistics.median(runs):.2f} s")
        for cumulative, name in top_imports(options.root, args, options.top):
            print(f"  {cumulative:>9,} us  {name}")


if __name__ == "__main__":
    main()
