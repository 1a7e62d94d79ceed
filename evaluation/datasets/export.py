"""A dataset version written back out as JSONL, in the line format
``import_dataset`` reads (``evaluation.datasets.jsonl``), so that exporting
a version and importing the file under another name gives the same examples
(``versions.CONTENT_FIELDS``).

What the file cannot carry: ``context.database_path`` and
``context.database_root`` are derived from ``context.database_file`` on
import, against the folder of the file being imported, so they are left out
(an SQL dataset re-imports to the same content only from a file beside its
databases); the dataset's own plugins, scorer and rubric are options of
``import_dataset``, not lines.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from common.errors import BadInput, NotFound
from evaluation.datasets.conversation_spec import conversation_kind
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import DatasetRef, dataset_ref, example_spec, examples_at, version_check
from evaluation.models import Dataset

#: ``context`` keys the import derives (``jsonl._context``); an input line may not hold them.
DERIVED_CONTEXT_KEYS = ("database_path", "database_root")


def dataset_export_ref(raw: str) -> DatasetRef:
    """The dataset and version ``NAME`` (the latest) or ``NAME@VERSION`` names.

    Raises ``NotFound`` for an unknown name and ``BadInput`` for a malformed
    or unknown version. Unlike ``run_eval``'s ``dataset_resolve_ref`` it never
    imports anything (not a file, not the demo)."""
    ref = dataset_ref(raw)
    name, version = ref if ref is not None else (raw, None)
    dataset = Dataset.objects.filter(name=name).first()
    if dataset is None:
        raise NotFound(f"no dataset named {name!r}")
    version_check(dataset, version)
    return DatasetRef(dataset, version)


def example_record(spec: ExampleSpec) -> dict[str, Any]:
    """One example as a JSONL line's object: the known fields first
    (``question_id``, ``question``, ``answer``, ``task_type``, ``choices``,
    ``context``, ``scorer``, ``plugins``; ``null`` or ``[]`` when absent),
    then the metadata at top level, as ``parse_records`` reads them back.
    ``context`` leaves out ``DERIVED_CONTEXT_KEYS``. A conversation example
    has no ``question`` and ``answer``: its ``turns``, or its
    ``simulated_user`` and ``success``, are in its metadata."""
    context = {k: v for k, v in (spec.context or {}).items() if k not in DERIVED_CONTEXT_KEYS}
    conversation = conversation_kind(spec.metadata) is not None
    return {
        "question_id": spec.external_id,
        **({} if conversation else {"question": spec.question, "answer": spec.answer}),
        "task_type": spec.task_type,
        "choices": spec.choices,
        "context": context or None,
        "scorer": spec.scorer,
        "plugins": list(spec.plugins),
        **spec.metadata,
    }


def dataset_export_jsonl(ref: DatasetRef, write: Callable[[str], object]) -> int:
    """Write the examples of ``ref`` (its version, else the latest), in the
    dataset's order, one JSON line each (UTF-8 text, ``\\n``-terminated,
    non-ASCII kept as is) through ``write``; return how many. Streams: the
    rows are read in chunks, never all at once."""
    count = 0
    for row in examples_at(ref.dataset, ref.version).iterator(chunk_size=2000):
        write(json.dumps(example_record(example_spec(row)), ensure_ascii=False) + "\n")
        count += 1
    return count


@contextmanager
def file_replacing(path: Path) -> Iterator[TextIO]:
    """A UTF-8 text file (``newline=""``: the writer's line ends as given)
    that replaces ``path`` only when the block ends without an error; until
    then it is ``.NAME.PID.part`` beside it, removed on an error, so a failed
    export never leaves half a file or clobbers the one there. ``OSError``
    when the folder is missing or not writable, or ``path`` is a folder."""
    if path.is_dir():
        raise IsADirectoryError(21, "is a folder", str(path))
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with part.open("w", encoding="utf-8", newline="") as out:
            yield out
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def out_path_check(out: str, *, suffixes: tuple[str, ...] = ()) -> Path:
    """``--out FILE`` as a path; ``BadInput`` when it does not end in one of
    ``suffixes`` (any, when empty; case-insensitive) or its folder does not exist."""
    path = Path(out)
    if suffixes and path.suffix.lower() not in suffixes:
        raise BadInput(f"--out {out}: the file name must end in {' or '.join(suffixes)}")
    if not path.resolve().parent.is_dir():
        raise BadInput(f"--out {out}: folder {path.resolve().parent} does not exist")
    return path
