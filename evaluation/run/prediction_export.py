"""A run's predictions as rows for a spreadsheet or a notebook: the one
place ``manage.py export_predictions`` and the run admin's "Export
predictions (CSV)" action build them.

One row per prediction, runs in the order they were started, then in
example order (the dataset's ``position``), then epoch. Rows are read in
chunks (``QuerySet.iterator``), so a 100,000-row run never sits in memory as
model instances; the admin's download is one response built in memory (use
the command for very large runs).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypedDict, cast

from django.db.models import QuerySet
from django.http import HttpResponse
from django.urls import reverse
from django.utils.http import content_disposition_header

from common.csv_cells import csv_cell_neutralise
from evaluation.models import Prediction, Run


class PredictionRow(TypedDict):
    """One exported prediction. ``gold``: the gold answer the prediction was
    scored against, as text (a list of aliases as its JSON text);
    ``correct``/``score``: ``None`` when it could not be scored (not the same
    as wrong); tokens, ``cost`` (US dollars) and ``latency_ms``: ``None``
    when unknown; ``turn_url``: the path of the turn's admin page, ``""``
    when the prediction has no turn (there is no setting for the site's
    base URL, so it is a path, not an absolute URL)."""

    run_id: str
    question_id: str
    epoch: int
    task_type: str
    question: str
    gold: str
    prediction: str
    correct: bool | None
    score: float | None
    stop_reason: str
    steps: int
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    latency_ms: int | None
    error: str
    turn_url: str


#: The columns, in order: the CSV header and the keys of each JSON line.
COLUMNS: tuple[str, ...] = tuple(PredictionRow.__annotations__)

#: What each row is read from (``turn_url`` from ``turn_id``).
_FIELDS = {column: column for column in COLUMNS} | {
    "run_id": "run__run_id",
    "question_id": "example__external_id",
    "question": "example__question",
    "gold": "gold_answer",
    "turn_url": "turn_id",
}


def prediction_rows(runs: Iterable[Run] | QuerySet[Run]) -> Iterator[PredictionRow]:
    """The predictions of ``runs`` as ``PredictionRow`` s, in export order;
    one query, read 2,000 rows at a time."""
    run_ids = [run.pk for run in runs]
    found = (
        Prediction.objects.filter(run_id__in=run_ids)
        .order_by("run__created_at", "run_id", "example__position", "example_id", "epoch")
        .values_list(*_FIELDS.values())
    )
    for values in found.iterator(chunk_size=2000):
        row: dict[str, Any] = dict(zip(_FIELDS, values, strict=True))
        gold = row["gold"]
        row["gold"] = gold if isinstance(gold, str) else json.dumps(gold, ensure_ascii=False)
        turn_id = row["turn_url"]
        row["turn_url"] = reverse("admin:turns_turn_change", args=[turn_id]) if turn_id else ""
        yield cast(PredictionRow, row)


def _csv_cell(value: Any) -> Any:
    """``true``/``false`` for a boolean (as in JSON), ``""`` for ``None``, text
    that a spreadsheet would read as a formula behind an apostrophe
    (``common.csv_cells``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return csv_cell_neutralise(value)
    return "" if value is None else value


def write_csv(rows: Iterable[PredictionRow], out: Any) -> int:
    """Write a header row and ``rows`` as CSV (``csv.writer``, ``\\r\\n``
    line ends; a text cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or
    a carriage return behind an apostrophe) to ``out``, a text stream opened with ``newline=""``; return
    the number of rows written (the header not counted)."""
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    count = 0
    for row in rows:
        cells: Mapping[str, object] = row
        writer.writerow([_csv_cell(cells[column]) for column in COLUMNS])
        count += 1
    return count


def write_jsonl(rows: Iterable[PredictionRow], write: Callable[[str], object]) -> int:
    """Write ``rows`` as one JSON object per line (``null`` for unknown,
    non-ASCII kept as is) through ``write``; return how many."""
    count = 0
    for row in rows:
        write(json.dumps(row, ensure_ascii=False) + "\n")
        count += 1
    return count


def predictions_csv_response(runs: QuerySet[Run]) -> HttpResponse:
    """The predictions of ``runs`` as a CSV download (UTF-8, a header row,
    ``write_csv``): ``RUN_ID-predictions.csv`` for one run,
    ``predictions-N-runs.csv`` for several; the ``run_id`` column tells them
    apart."""
    selected = list(runs.order_by("created_at", "pk"))
    name = (
        f"{selected[0].run_id}-predictions.csv"
        if len(selected) == 1
        else f"predictions-{len(selected)}-runs.csv"
    )
    response = HttpResponse(
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": content_disposition_header(True, name)},
    )
    write_csv(prediction_rows(selected), response)
    return response
