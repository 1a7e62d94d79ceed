"""``sql_result`` against the Spider test-suite's execution accuracy.

Reference: taoyds/test-suite-sql-eval at commit
e97acc546ecbee8fa27fa8dbf025ef61493a876c, ``exec_eval.py``: ``result_eq``
with its helpers ``permute_tuple``, ``unorder_row``, ``quick_rej``,
``multiset_eq`` and ``get_constraint_permutation`` — two denotations are
equal when some permutation of the columns (and, unless the gold query has
``ORDER BY``, of the rows) makes them equal. Ported below as
:func:`result_eq`.

Variants are generated from the 61 rows of the shared Spider file, from
their gold result rows, rendered as the JSON an agent gives.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict
from typing import Any

from evaluation.scoring import score
from tests.evaluation.conformance.cases import Case, disagreements, rows

Row = tuple[Any, ...]


def _unorder_row(row: Row) -> Row:
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


def _quick_rej(result1: list[Row], result2: list[Row], order_matters: bool) -> bool:
    s1 = [_unorder_row(row) for row in result1]
    s2 = [_unorder_row(row) for row in result2]
    return s1 == s2 if order_matters else set(s1) == set(s2)


def _multiset_eq(l1: list[Row], l2: list[Row]) -> bool:
    if len(l1) != len(l2):
        return False
    counts: dict[Row, int] = defaultdict(int)
    for e in l1:
        counts[e] += 1
    for e in l2:
        counts[e] -= 1
        if counts[e] < 0:
            return False
    return True


def _constraint_permutations(by_columns: list[set[Any]], result2: list[Row]) -> Any:
    num_cols = len(result2[0])
    constraints = [set(range(num_cols)) for _ in range(num_cols)]
    if num_cols <= 3:
        return itertools.product(*constraints)
    rng = random.Random(0)
    for _ in range(20):
        row = rng.choice(result2)
        for col1 in range(num_cols):
            for col2 in set(constraints[col1]):
                if row[col2] not in by_columns[col1]:
                    constraints[col1].remove(col2)
    return itertools.product(*constraints)


def result_eq(result1: list[Row], result2: list[Row], order_matters: bool) -> bool:
    """``result_eq(gold, predicted, order_matters)`` of the test-suite."""
    if len(result1) == 0 and len(result2) == 0:
        return True
    if len(result1) != len(result2):
        return False
    num_cols = len(result1[0])
    if len(result2[0]) != num_cols:
        return False
    if not _quick_rej(result1, result2, order_matters):
        return False
    by_columns = [{row[i] for row in result1} for i in range(num_cols)]
    for perm in _constraint_permutations(by_columns, result2):
        if len(perm) != len(set(perm)):
            continue
        permuted = result2 if num_cols == 1 else [tuple(row[i] for i in perm) for row in result2]
        if order_matters:
            if result1 == permuted:
                return True
        elif set(result1) == set(permuted) and _multiset_eq(result1, permuted):
            return True
    return False


def _changed(cell: Any) -> Any:
    if isinstance(cell, bool) or cell is None:
        return "changed"
    if isinstance(cell, (int, float)):
        return cell + 1
    return f"{cell}x"


def _rounded(cell: Any) -> Any:
    return float(f"{cell:.6g}") if isinstance(cell, float) and not cell.is_integer() else cell


def _as_text(cell: Any) -> Any:
    return str(cell) if isinstance(cell, (int, float)) and not isinstance(cell, bool) else cell


def _upper(cell: Any) -> Any:
    return cell.upper() if isinstance(cell, str) else cell


def _variants(gold: list[Row]) -> list[tuple[str, list[Row]]]:
    """Every form's predicted rows for one gold result (forms that would
    not change anything are left out)."""
    width = len(gold[0]) if gold else 0
    out: list[tuple[str, list[Row]]] = [("as given", gold), ("rows reversed", gold[::-1])]
    for perm in itertools.permutations(range(width)):
        if perm != tuple(range(width)):
            permuted = [tuple(row[i] for i in perm) for row in gold]
            out += [("columns permuted", permuted), ("columns permuted, rows reversed", permuted[::-1])]
    if gold:
        out += [("a row dropped", gold[:-1]), ("a row repeated", [*gold, gold[0]])]
        out.append(("one cell changed", [(_changed(gold[0][0]), *gold[0][1:]), *gold[1:]]))
    for form, change in (
        ("numbers as text", _as_text),
        ("text in upper case", _upper),
        ("floats rounded", _rounded),
    ):
        changed = [tuple(change(c) for c in row) for row in gold]
        if changed != gold:
            out.append((form, changed))
    return out


#: Forms where AgentLab's cell comparison is wider than the reference's
#: Python equality: (AgentLab, reference) and why.
DEVIATING_FORMS = {
    "numbers as text": (True, False, 'an answer is text: "6" is the number 6'),
    "text in upper case": (True, False, "text cells compare case-folded, as a person reads them"),
    "floats rounded": (True, False, "numbers compare within rel 1e-4: 31.3333 is 31.333333333333332"),
}


def _cases() -> list[Case]:
    cases = []
    for row in rows("spider-dev-sql-61.jsonl"):
        gold = [tuple(r) for r in row["result_rows"]]
        for form, predicted in _variants(gold):
            extra = (("gold_rows", tuple(gold)), ("predicted", tuple(predicted)), ("ordered", row["ordered"]))
            cases.append(Case(row["question_id"], form, json.dumps(predicted), row["answer"], extra))
    return cases


def _ours(case: Case) -> bool:
    extra = dict(case.extra)
    metadata = {"result_rows": [list(r) for r in extra["gold_rows"]], "ordered": extra["ordered"]}
    return bool(
        score(prediction=case.prediction, gold=case.gold, scorer="sql_result", metadata=metadata).correct
    )


def _reference(case: Case) -> bool:
    extra = dict(case.extra)
    return result_eq(list(extra["gold_rows"]), list(extra["predicted"]), extra["ordered"])


def test_sql_result_agrees_with_the_spider_test_suite_except_the_documented_deviations() -> None:
    cases = _cases()
    broken, per_form = disagreements(cases, ours=_ours, reference=_reference, deviations=DEVIATING_FORMS)
    assert [(o.case.source, o.case.form, o.case.prediction, o.ours, o.reference) for o in broken] == []
    assert per_form["columns permuted"] == 24 * 1 + 8 * 5
    assert len(cases) == sum(per_form.values()) > 500


def test_columns_in_another_order_are_right_as_in_the_test_suite() -> None:
    """Failing before: a query selecting ``name, age`` for a gold ``age, name`` was wrong."""
    gold = [["Joe Sharp", "Netherlands", 52], ["John Nizinik", "France", 43]]
    predicted = [[52, "Joe Sharp", "Netherlands"], [43, "John Nizinik", "France"]]
    result = score(
        prediction=json.dumps(predicted), gold="x", scorer="sql_result", metadata={"result_rows": gold}
    )
    assert result.correct is True
    assert result.explanation == "unordered result matches gold (2 rows; columns in another order)"
    assert result_eq([tuple(r) for r in gold], [tuple(r) for r in predicted], False) is True
    # a column order that puts a different value in a cell is still wrong
    swapped = [[43, "Joe Sharp", "Netherlands"], [52, "John Nizinik", "France"]]
    assert (
        score(
            prediction=json.dumps(swapped), gold="x", scorer="sql_result", metadata={"result_rows": gold}
        ).correct
        is False
    )
