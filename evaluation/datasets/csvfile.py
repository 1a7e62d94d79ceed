"""Read a CSV dataset file (``import_dataset FILE.csv [--map …]``): each row
becomes the object a JSONL line would be, checked by the same rules
(``jsonl.parse_numbered``), so a bad row is a ``DatasetFormatError`` naming
its line and nothing is returned unless the whole file is valid.

The file is UTF-8 (a leading byte-order mark is allowed) with a header row;
line numbers are the file's own (the header is line 1; a row whose quoted
cell spans lines is named by its first line). ``--map field=column,…`` says
which column holds which field (``MAPPABLE_FIELDS``); an unmapped field is
read from the column of its own name. Cells are text: ``question_id``,
``question``, ``answer`` (never a list of aliases), ``task_type`` as they
are; ``scorer`` and ``split`` as they are, an empty cell absent; ``choices``,
``plugins``, ``tags`` (a JSON array) and ``context`` (a JSON object) as JSON
text, an empty cell absent. The expected trajectory's columns (docs/evaluating.md#trajectories)
are JSON text too — ``trajectory`` (an array), ``arg_rules`` (an object),
``trajectory_max_steps`` and ``trajectory_slack`` (numbers) — and
``trajectory_match``, ``args_match`` text; an empty cell is absent. Every
other column is kept as example metadata, as text; a column named like a
field that ``--map`` reads from another column is left out.
A cell that begins with apostrophes and then ``=``, ``+``, ``-``, ``@``, a
tab or a carriage return loses one apostrophe — the one a CSV export adds so
that a spreadsheet does not run it as a formula (``common.csv_cells``) — so
an exported file imports as it was.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from common.csv_cells import csv_cell_restore
from common.errors import BadInput
from evaluation.datasets.jsonl import DatasetFormatError, parse_numbered
from evaluation.datasets.spec import ExampleSpec

#: The fields ``--map`` may name (and the columns read by default).
MAPPABLE_FIELDS = ("question_id", "question", "answer", "task_type", "choices", "context", "scorer")

#: Every field a row's cells are read into (``plugins``, ``split`` and ``tags`` columns are read too).
_FIELDS = (*MAPPABLE_FIELDS, "plugins", "split", "tags")

#: The fields whose cells are JSON text, and the JSON type each must be.
_JSON_FIELDS: dict[str, type] = {"choices": list, "plugins": list, "context": dict, "tags": list}

#: Metadata columns of the expected trajectory whose cells are JSON text (an
#: empty cell absent), and the JSON type each must be.
_TRAJECTORY_JSON: dict[str, type] = {
    "trajectory": list,
    "arg_rules": dict,
    "trajectory_max_steps": int,
    "trajectory_slack": int,
}

#: Metadata columns of the expected trajectory an empty cell leaves absent.
_TRAJECTORY_TEXT = ("trajectory_match", "args_match")

#: Fields an empty cell leaves absent.
_OPTIONAL = ("choices", "context", "scorer", "plugins", "split", "tags")

#: Fields a missing column leaves missing on every row: the header is wrong.
_REQUIRED = ("question_id", "question", "answer", "task_type")


def parse_column_map(specs: Sequence[str]) -> dict[str, str]:
    """``--map`` values (``["question=prompt,answer=expected", …]``) as
    ``{field: column}``. Raises ``BadInput`` for an item without ``=``, an
    empty column, a field not in ``MAPPABLE_FIELDS``, or a field named twice."""
    mapping: dict[str, str] = {}
    for spec in specs:
        for item in spec.split(","):
            field, sep, column = (part.strip() for part in item.partition("="))
            if not sep or not field or not column:
                raise BadInput(f"--map {spec!r}: give FIELD=COLUMN pairs separated by commas, got {item!r}")
            if field not in MAPPABLE_FIELDS:
                raise BadInput(
                    f"--map {spec!r}: unknown field {field!r} (fields: {', '.join(MAPPABLE_FIELDS)})"
                )
            if field in mapping:
                raise BadInput(f"--map: field {field!r} is mapped twice")
            mapping[field] = column
    return mapping


def parse_csv(path: str | Path, *, columns: dict[str, str] | None = None) -> list[ExampleSpec]:
    """Read and validate a whole CSV dataset file; return its examples in file order.

    ``columns``: ``{field: column}`` from ``parse_column_map``. Raises
    ``DatasetFormatError`` naming the file and the line for: a file that
    cannot be read or is not UTF-8; a quote left open, or followed by
    something other than a comma; a header (line 1) without a mapped column,
    without a column for a required field, or with a column twice; a row
    with more or fewer cells than the header; a ``choices``, ``plugins`` or
    ``context`` cell that is not the JSON it must be; and whatever
    ``parse_numbered`` refuses (a missing field, an unknown scorer, a
    duplicate ``question_id`` …); with ``line=None``, a file with no rows.
    ``context.database_file`` is resolved against the file's folder."""
    path = Path(path)
    source = str(path)
    rows = _rows(csv.reader(io.StringIO(_read_text(path), newline=""), strict=True), source)
    header = _header(next(rows, None), columns or {}, source)

    def records() -> Iterator[tuple[int, dict[str, Any]]]:
        for line, cells in rows:
            if len(cells) != len(header):
                raise DatasetFormatError(
                    f"{len(cells)} cells, the header has {len(header)}", path=source, line=line
                )
            cells = [csv_cell_restore(cell) for cell in cells]
            yield line, _record(dict(zip(header, cells, strict=True)), columns or {}, source, line)

    return parse_numbered(
        records(),
        source=source,
        base_dir=path.resolve().parent,
        empty="no examples (the file has no rows under its header)",
    )


def _read_text(path: Path) -> str:
    """The file's text without a leading byte-order mark; ``DatasetFormatError``
    when it cannot be read or is not UTF-8 (naming the line of the bad byte)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetFormatError(f"cannot read the file: {exc.strerror or exc}", path=path) from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetFormatError("not valid UTF-8", path=path, line=line) from exc


def _header(first: tuple[int, list[str]] | None, columns: dict[str, str], source: str) -> list[str]:
    """The header row's column names (stripped; a blank one names a column
    nothing reads), checked against the mapping; its errors name line 1."""
    if first is None or first[0] != 1:
        raise DatasetFormatError(
            "no header row (the file is empty or starts with a blank line)", path=source, line=1
        )
    header = [cell.strip() for cell in first[1]]
    twice = sorted({name for name in header if name and header.count(name) > 1})
    if twice:
        raise DatasetFormatError(f"column {twice[0]!r} appears twice in the header", path=source, line=1)
    names = ", ".join(header)
    for field, column in columns.items():
        if column not in header:
            message = f"--map {field}={column}: no column {column!r} (the columns are: {names})"
            raise DatasetFormatError(message, path=source, line=1)
    for field in _REQUIRED:
        if field not in columns and field not in header:
            message = f"no column {field!r} (the columns are: {names}); name it with --map {field}=COLUMN"
            raise DatasetFormatError(message, path=source, line=1)
    return header


def _rows(reader: Any, source: str) -> Iterator[tuple[int, list[str]]]:
    """``(first line, cells)`` of each row, the header included; blank lines skipped."""
    while True:
        line = reader.line_num + 1
        try:
            cells = next(reader, None)
        except csv.Error as exc:
            raise DatasetFormatError(f"not valid CSV: {exc}", path=source, line=line) from exc
        if cells is None:
            return
        if cells:
            yield line, cells


def _record(row: dict[str, str], columns: dict[str, str], source: str, line: int) -> dict[str, Any]:
    """A row as the object ``parse_numbered`` reads: each field from its
    column, JSON cells decoded, every column no field reads as metadata."""
    used = {columns.get(field, field) for field in _FIELDS}
    record: dict[str, Any] = {k: v for k, v in row.items() if k and k not in used and k not in _FIELDS}
    for name in (*_TRAJECTORY_JSON, *_TRAJECTORY_TEXT):
        if name in record and not record[name].strip():
            del record[name]  # an empty cell: absent
        elif name in _TRAJECTORY_JSON and name in record:
            record[name] = _json_cell(record[name], name, name, source, line)
    for field in _FIELDS:
        column = columns.get(field, field)
        if column not in row or (field in _OPTIONAL and not row[column].strip()):
            continue  # an empty optional cell: the field is absent
        cell = row[column]
        record[field] = _json_cell(cell, field, column, source, line) if field in _JSON_FIELDS else cell
    return record


def _json_cell(cell: str, field: str, column: str, source: str, line: int) -> Any:
    """A ``choices``/``plugins``/``tags``/``trajectory`` (JSON array), ``context``/``arg_rules``
    (JSON object) or a trajectory step count (JSON number) cell, decoded."""
    want = _JSON_FIELDS.get(field) or _TRAJECTORY_JSON[field]
    kind = "a JSON array" if want is list else "a JSON object" if want is dict else "a whole number"
    try:
        value = json.loads(cell)
    except json.JSONDecodeError as exc:
        message = f"field {field!r} (column {column!r}) must be {kind}: {exc.msg} (character {exc.pos + 1})"
        raise DatasetFormatError(message, path=source, line=line) from exc
    if not isinstance(value, want) or isinstance(value, bool):
        example = '["Paris", "Rome"]' if want is list else '{"documents": []}' if want is dict else "3"
        message = f"field {field!r} (column {column!r}) must be {kind}, e.g. {example}"
        raise DatasetFormatError(message, path=source, line=line)
    return value
