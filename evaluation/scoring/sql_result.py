"""The ``sql_result`` scorer: the agent's answer against a SQL query's result rows.

``sql_result``
    Compares the prediction with a SQL query's result rows, cell by cell, with
    numeric tolerance and, unless the example's metadata says ``ordered: true``,
    ignoring row order; see :func:`score_sql_result`. This is the default for
    ``sql`` examples because Spider's answers are result values (``"6"``,
    ``"31.333333333333332"``, JSON lists), not SQL text — the "execution
    accuracy" view of Spider (Yu et al., 2018) applied to the agent's final
    answer.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from evaluation.scoring.base import Score
from evaluation.scoring.normalize import normalize_answer
from evaluation.scoring.numbers import extract_last_number, format_number, is_close, parse_number

_CODE_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_MAX_LITERAL_CHARS = 200_000
_NOT_PARSED = object()


def _parse_literal(text: str) -> Any:
    """JSON, else a Python literal (``[('a', 1)]`` as printed by ``sqlite3``), else _NOT_PARSED."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    if len(text) <= _MAX_LITERAL_CHARS:
        try:
            with warnings.catch_warnings():
                # literal_eval compiles the text; odd input such as "1a" warns.
                warnings.simplefilter("ignore", SyntaxWarning)
                return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return _NOT_PARSED


def _parse_structured(text: str) -> Any:
    fenced = _CODE_FENCE_RE.match(text)
    if fenced:
        text = fenced.group(1)
    text = text.strip()
    value = _parse_literal(text)
    if value is _NOT_PARSED:
        start, end = text.find("["), text.rfind("]")
        if 0 <= start < end:
            value = _parse_literal(text[start : end + 1])
    return value


def _is_seq(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _row_views(value: Any) -> list[list[list[Any]]]:
    """The ways a parsed prediction can be read as result rows.

    A list of lists is rows; a flat list is either one column (several rows) or
    one row (several columns); a scalar is one row with one cell."""
    if _is_seq(value):
        if not value:
            return [[]]
        if all(_is_seq(v) for v in value):
            return [[list(v) for v in value]]
        if any(_is_seq(v) or isinstance(v, dict) for v in value):
            return []
        return [[[v] for v in value], [list(value)]]
    if isinstance(value, dict):
        return []
    return [[[value]]]


def _cell_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return parse_number(value)
    return None


def _cells_equal(pred: Any, gold: Any) -> bool:
    """Numbers (or numeric strings) with tolerance; NULL only equals NULL; text
    stripped and case-folded."""
    pred_num, gold_num = _cell_number(pred), _cell_number(gold)
    if pred_num is not None and gold_num is not None:
        return is_close(pred_num, gold_num)
    if pred is None or gold is None:
        return pred is None and gold is None
    return str(pred).strip().casefold() == str(gold).strip().casefold()


def _rows_equal(pred_row: Sequence[Any], gold_row: Sequence[Any]) -> bool:
    return len(pred_row) == len(gold_row) and all(
        _cells_equal(p, g) for p, g in zip(pred_row, gold_row, strict=True)
    )


def _same_rows(pred_rows: list[list[Any]], gold_rows: list[list[Any]], *, ordered: bool) -> bool:
    if ordered:
        return all(_rows_equal(p, g) for p, g in zip(pred_rows, gold_rows, strict=True))
    # Multiset comparison. Greedy matching is exact when equality is transitive;
    # with the rounding tolerance that only fails for rows differing by about
    # half a unit in their last place, which query results do not contain.
    unused = list(pred_rows)
    for gold_row in gold_rows:
        for i, pred_row in enumerate(unused):
            if _rows_equal(pred_row, gold_row):
                del unused[i]
                break
        else:
            return False
    return True


#: At most this many column orders are tried (8 columns have 40,320).
MAX_COLUMN_ORDERS = 40_320


def _cell_kind(cell: Any) -> tuple[str, str]:
    """What a cell must share with the gold's to possibly equal it: a number
    (any: tolerance is checked later), NULL, or its text case-folded."""
    if _cell_number(cell) is not None:
        return ("number", "")
    if cell is None:
        return ("null", "")
    return ("text", str(cell).strip().casefold())


def _column_orders(
    pred_rows: list[list[Any]], gold_rows: list[list[Any]], width: int
) -> Iterator[tuple[int, ...]]:
    """Orders of the prediction's columns worth trying against the gold's: the
    given order first, then every other assignment in which each gold column
    gets a prediction column of the same kinds of cells (:func:`_cell_kind`,
    as a multiset) — the pruning of the Spider test-suite's
    ``get_constraint_permutation``, exact here rather than sampled. At most
    :data:`MAX_COLUMN_ORDERS` are tried."""
    identity = tuple(range(width))
    yield identity
    kinds_pred = [Counter(_cell_kind(row[i]) for row in pred_rows) for i in range(width)]
    kinds_gold = [Counter(_cell_kind(row[j]) for row in gold_rows) for j in range(width)]
    fits = [[i for i in range(width) if kinds_pred[i] == kinds_gold[j]] for j in range(width)]
    orders = (o for o in itertools.product(*fits) if len(set(o)) == width and o != identity)
    yield from itertools.islice(orders, MAX_COLUMN_ORDERS)


def _results_match(pred_rows: list[list[Any]], gold_rows: list[list[Any]], *, ordered: bool) -> str | None:
    """How the prediction's rows match the gold's — ``"same columns"`` or
    ``"columns in another order"`` — or ``None`` when they do not."""
    if len(pred_rows) != len(gold_rows):
        return None
    width = len(gold_rows[0]) if gold_rows else 0
    if not gold_rows or any(len(r) != width for r in (*pred_rows, *gold_rows)):
        return "same columns" if _same_rows(pred_rows, gold_rows, ordered=ordered) else None
    for order in _column_orders(pred_rows, gold_rows, width):
        permuted = [[row[i] for i in order] for row in pred_rows]
        if _same_rows(permuted, gold_rows, ordered=ordered):
            return "same columns" if order == tuple(range(width)) else "columns in another order"
    return None


def _gold_rows(gold: str, metadata: dict[str, Any] | None) -> list[list[Any]] | None:
    rows = (metadata or {}).get("result_rows")
    if isinstance(rows, (list, tuple)) and all(_is_seq(r) for r in rows):
        return [list(r) for r in rows]
    try:
        value = json.loads(gold)
    except ValueError:
        return [[gold]]
    views = _row_views(value)
    return views[0] if views else None


def score_sql_result(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """A SQL answer vs. the gold query's result rows ("execution accuracy" on the final answer).

    Gold rows: ``metadata["result_rows"]`` (list of rows, each a list of values)
    when present, else ``gold`` read as in the Spider subset's README: JSON list
    of rows, JSON list of values (one column), or a single value (a JSON scalar,
    or the raw text such as ``"France"``).

    Prediction: JSON, or a Python literal (``[('Love', '2016')]`` as printed by
    ``sqlite3``), optionally in a ```` ``` ```` code fence; failing that, the
    first ``[`` … last ``]`` span; failing that, the raw text as one value. A flat
    list may be one column or one row — either reading counts.

    Comparison: same number of rows and columns, in any column order (a
    query selecting ``name, age`` for a gold ``age, name`` is right, as in the
    Spider test-suite's ``result_eq``, which searches column permutations); cells
    equal when both parse as numbers (``6`` == ``"6"`` == ``6.0``; equal within
    abs 1e-6 or, for a gold cell that is not whole, rounded to the digits
    written, so ``31.333`` == ``31.333333333333332`` but ``52501`` != ``52500``;
    ``evaluation.scoring.numbers.is_close``), else as text after
    ``strip()`` and case folding (``"Gonzalo Higuaín "`` == ``"gonzalo higuaín"``).
    Rows are compared in order only when ``metadata["ordered"]`` is ``True``
    (Spider: gold query has ``ORDER BY``); otherwise as a multiset (duplicates
    count). When the gold is a single value and the prediction is free text
    (``"There are 6 singers."``), the numeric rule (last number) applies to a
    numeric gold and normalised exact match to a text gold.
    """
    gold_rows = _gold_rows(gold, metadata)
    if gold_rows is None:
        return Score.unscored("sql_result", f"gold {gold!r} is not a result set")
    if not prediction.strip():
        return Score.of(False, "sql_result", "no prediction")
    ordered = bool((metadata or {}).get("ordered", False))
    parsed = _parse_structured(prediction)
    if parsed is _NOT_PARSED:
        if len(gold_rows) == 1 and len(gold_rows[0]) == 1:
            gold_cell = gold_rows[0][0]
            gold_num = _cell_number(gold_cell)
            if gold_num is not None:
                pred_num = extract_last_number(prediction)
                ok = pred_num is not None and is_close(pred_num, gold_num)
                shown = "no number" if pred_num is None else format_number(pred_num)
                return Score.of(ok, "sql_result", f"single value: {shown} vs gold {format_number(gold_num)}")
            ok = _cells_equal(prediction, gold_cell) or (
                normalize_answer(prediction) == normalize_answer(str(gold_cell)) != ""
            )
            return Score.of(ok, "sql_result", f"single value {'matches' if ok else 'differs from'} gold")
        return Score.of(
            False, "sql_result", f"prediction is not a list of rows; gold has {len(gold_rows)} rows"
        )
    matches = [
        m for m in (_results_match(rows, gold_rows, ordered=ordered) for rows in _row_views(parsed)) if m
    ]
    order = "ordered" if ordered else "unordered"
    columns = "; columns in another order" if matches and "same columns" not in matches else ""
    return Score.of(
        bool(matches),
        "sql_result",
        f"{order} result {'matches' if matches else 'differs from'} gold ({len(gold_rows)} rows{columns})",
    )
