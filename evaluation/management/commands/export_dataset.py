"""``manage.py export_dataset NAME[@VERSION] --out FILE`` — write a dataset
version's examples as JSONL, in the format ``import_dataset`` reads
(``evaluation.datasets.export``); ``--out -`` writes them to stdout.

Prints one line to stderr: ``wrote 100 examples of arc@2 to arc.jsonl``.
Exit codes: 0 done, 2 bad input (an unknown dataset or version, a folder
that does not exist or cannot be written, a database that cannot be reached
or is not migrated); nothing is left at ``FILE`` then.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError
from evaluation.datasets.export import (
    dataset_export_jsonl,
    dataset_export_ref,
    file_replacing,
    out_path_check,
)


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Write a dataset version's examples (NAME: the latest, NAME@2: version 2) as JSONL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dataset", metavar="NAME[@VERSION]", help="a registered dataset, e.g. gsm8k@2")
        parser.add_argument(
            "--out", required=True, metavar="FILE", help="the .jsonl file to write; - for stdout"
        )

    def handle(self, *args: Any, dataset: str, out: str, **opts: Any) -> None:
        try:
            with exit_codes(AgentLabError):
                path = None if out == "-" else out_path_check(out, suffixes=(".jsonl",))
                with database_errors():
                    database_check()
                    ref = dataset_export_ref(dataset)
                    if path is None:
                        count = dataset_export_jsonl(ref, self.stdout.write)
                    else:
                        with file_replacing(path) as target:
                            count = dataset_export_jsonl(ref, target.write)
        except OSError as exc:
            raise CommandError(f"cannot write --out {out}: {exc.strerror or exc}", returncode=2) from exc
        where = "stdout" if path is None else str(path)
        self.stderr.write(f"wrote {count} examples of {ref.dataset.name}@{ref.number} to {where}")
