"""What a new dataset version costs on a large dataset: rows written and seconds.

Registers a synthetic dataset of ``--examples`` math examples (default
100,000) under a fresh name, then times:

1. a one-example edit (``dataset_change`` with one changed example: what an
   admin edit does);
2. a whole re-import of the dataset with 1 % of the examples changed (every
   100th gold answer corrected), through ``import_dataset`` as a user runs it.

For each it prints the seconds, the example rows inserted and updated, and
all rows written (examples, the version row, the dataset's version number),
counted from the SQL the step ran. Nothing is copied for unchanged examples,
so the rows written follow the change, not the dataset's size.

    python bench/dataset_versions.py [--examples 100000]
        [--pg-url postgres://postgres@127.0.0.1:5432/agentlab_bench]

The bench database is created and migrated if missing (as ``eval_throughput.py``
does); pass ``--pg-url sqlite`` to use a temporary SQLite file instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from agentlab.testing.databases import ensure_pg_database

ROOT = Path(__file__).resolve().parent.parent


def lines(n: int, *, changed_every: int = 0) -> list[dict[str, str]]:
    """``n`` examples ``q0 … q{n-1}``: "What is i + 1?" with gold ``i + 1``;
    with ``changed_every`` k, every k-th gold answer is ``i + 1.5`` instead."""
    return [
        {
            "question_id": f"q{i}",
            "question": f"What is {i} + 1?",
            "answer": str(i + 1.5) if changed_every and i % changed_every == 0 else str(i + 1),
            "task_type": "math",
        }
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/agentlab_bench"),
        help="PostgreSQL URL, or 'sqlite' for a temporary SQLite file",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentlab-versions-"))
    if args.pg_url == "sqlite":
        os.environ["DATABASE_URL"] = f"sqlite:///{workdir / 'bench.sqlite3'}"
    else:
        ensure_pg_database(args.pg_url)
        os.environ["DATABASE_URL"] = args.pg_url
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    run(args.examples, workdir)


def run(n: int, workdir: Path) -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from evaluation.datasets.spec import ExampleSpec
    from evaluation.datasets.versions import dataset_change
    from evaluation.models import Dataset, Example

    name = f"bench-{uuid.uuid4().hex[:8]}"
    first = workdir / "v1.jsonl"
    first.write_text("".join(json.dumps(line) + "\n" for line in lines(n)), encoding="utf-8")
    started = time.perf_counter()
    with open(os.devnull, "w") as quiet:
        call_command("import_dataset", str(first), "--name", name, stdout=quiet)
    seconds = time.perf_counter() - started
    print(f"{connection.vendor}: dataset {name}, {n:,} examples imported in {seconds:.1f} s")

    def measure(label: str, step) -> None:
        dataset = Dataset.objects.get(name=name)
        before = Example.objects.filter(dataset=dataset).count()
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            summary = step(dataset)
            seconds = time.perf_counter() - started
        inserted = Example.objects.filter(dataset=dataset).count() - before
        updated = Example.objects.filter(
            dataset=dataset, valid_to=Dataset.objects.get(pk=dataset.pk).version
        ).count()
        writes = [
            q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith(("INSERT", "UPDATE"))
        ]
        print(
            f"{label}: {seconds:.2f} s; example rows inserted {inserted:,}, closed (updated) {updated:,}; "
            f"rows written {inserted + updated + 2:,} (with the version row and the dataset's number) "
            f"in {len(writes)} write statements, {len(queries.captured_queries)} statements in all "
            f"— {summary}"
        )

    edit = ExampleSpec(
        external_id=f"q{n // 2}", question=f"What is {n // 2} + 1?", answer="corrected", task_type="math"
    )
    measure("one-example edit", lambda d: dataset_change(d, upserts=[edit], source="bench edit").summary())

    changed = workdir / "v3.jsonl"
    changed.write_text(
        "".join(json.dumps(line) + "\n" for line in lines(n, changed_every=100)), encoding="utf-8"
    )

    def reimport(dataset) -> str:
        out = workdir / "out.txt"
        with out.open("w") as stdout:
            call_command("import_dataset", str(changed), "--name", name, stdout=stdout)
        return out.read_text().strip()

    measure("re-import with 1 % changed", reimport)


if __name__ == "__main__":
    main()
