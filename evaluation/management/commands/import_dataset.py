"""``manage.py import_dataset FILE [--name NAME] [--map FIELD=COLUMN,…] [--plugin NAME …] [--scorer NAME]
[--rubric TEXT]`` — register a JSONL or CSV dataset (``.csv``: ``evaluation.datasets.csvfile``,
``--map`` names its columns), or its next version.

A name that exists with different examples gets the next version
(``dataset NAME: version 2 — 3 added, 1 changed, 0 removed``); the same
examples again change nothing and say so.

Exit codes: 0 done, 2 bad input (a bad file or name, a database that cannot be
reached or is not migrated).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.commands import BATCH_COMMAND_CHECKS, database_check, database_errors, exit_codes
from common.errors import AgentLabError, BadInput
from evaluation.datasets.csvfile import parse_column_map, parse_csv
from evaluation.datasets.jsonl import DatasetFormatError, parse_jsonl
from evaluation.datasets.services import dataset_fallback_task_types, dataset_import_version, fallback_note
from evaluation.datasets.spec import ExampleSpec


class Command(BaseCommand):
    requires_system_checks = BATCH_COMMAND_CHECKS
    help = "Import a JSONL or CSV dataset (question_id, question, answer, task_type, …) under a name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="path to a .jsonl or .csv file")
        parser.add_argument("--name", default=None, help="dataset name (default: the file's stem)")
        parser.add_argument(
            "--map",
            action="append",
            default=[],
            dest="columns",
            metavar="FIELD=COLUMN,…",
            help="for a .csv file: the columns holding the fields, e.g. question=prompt,answer=expected "
            "(an unmapped field is read from the column of its own name)",
        )
        parser.add_argument(
            "--plugin",
            action="append",
            default=[],
            dest="plugins",
            metavar="NAME",
            help="an entry-point plugin every run of the dataset switches on (repeatable; "
            "the last system prompt in the order given wins)",
        )

        parser.add_argument(
            "--scorer",
            default=None,
            help="the dataset's default scorer, for examples that name none (e.g. judge: the LLM judge)",
        )
        parser.add_argument("--rubric", default=None, help="the LLM judge's rubric for this dataset")

    def handle(self, *args: Any, file: str, name: str | None, plugins: list[str], **opts: Any) -> None:
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file", returncode=2)
        with exit_codes(DatasetFormatError, AgentLabError, ValueError), database_errors():
            database_check()
            examples = _examples(path, opts["columns"])
            change = dataset_import_version(
                name=name or path.stem,
                examples=examples,
                source=str(path.resolve()),
                plugins=plugins,
                scorer=opts.get("scorer"),
                rubric=opts.get("rubric"),
                new_version=True,
            )
            dataset = change.dataset
            self.stdout.write(
                change.summary()
                + (f"; plugins {', '.join(dataset.plugins)}" if dataset.plugins else "")
                + (f"; scorer {dataset.scorer}" if dataset.scorer else "")
            )
            note = fallback_note(dataset_fallback_task_types(dataset=dataset))
        if note:
            self.stderr.write(note)


def _examples(path: Path, columns: list[str]) -> list[ExampleSpec]:
    """The file's examples: a ``.csv`` read with its ``--map``, anything else as JSONL."""
    if path.suffix.lower() == ".csv":
        return parse_csv(path, columns=parse_column_map(columns))
    if columns:
        raise BadInput(f"--map names the columns of a .csv file; {path.name} is read as JSONL")
    return parse_jsonl(path)
