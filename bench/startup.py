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
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COMMANDS = (["help"], ["compare_runs", "--help"])


def cpu_seconds(root: Path, args: list[str]) -> float:
    """User + system CPU seconds of one ``manage.py ARGS`` run in ``root``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=root,
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


def main() -> None:
    """Parse the options and print each command's figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--top", type=int, default=10, help="imports to list (default 10)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose manage.py runs")
    parser.add_argument("command", nargs="*", help="one command and its arguments (default: two)")
    options = parser.parse_args()
    commands = [options.command] if options.command else [list(c) for c in DEFAULT_COMMANDS]
    for args in commands:
        runs = [cpu_seconds(options.root, args) for _ in range(options.runs)]
        figures = " ".join(f"{seconds:.2f}" for seconds in sorted(runs))
        print(f"manage.py {' '.join(args)}: CPU {figures} s, median {statistics.median(runs):.2f} s")
        for cumulative, name in top_imports(options.root, args, options.top):
            print(f"  {cumulative:>9,} us  {name}")


if __name__ == "__main__":
    main()
