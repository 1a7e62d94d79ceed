"""Check metrics as pure functions (evaluation/checks.py)."""

from __future__ import annotations

import io

from rich.console import Console

from evaluation.metrics.checks import CheckRow, check_metrics, check_row, checks_side_by_side
from evaluation.metrics.metrics_table import checks_table, format_table


def rows() -> list[CheckRow]:
    return [
        # turn 1 (math): two steps checked, one failed; turn check passed
        CheckRow(1, "math", "search_found_documents", "step", True),
        CheckRow(1, "math", "search_found_documents", "step", False),
        CheckRow(1, "math", "evidence_quotes_a_document", "turn", True),
        # turn 2 (document_qa): one step passed; turn check failed
        CheckRow(2, "document_qa", "search_found_documents", "step", True),
        CheckRow(2, "document_qa", "evidence_quotes_a_document", "turn", False),
    ]


def test_counts_per_check_overall_and_per_task_type():
    metrics = check_metrics(rows())

    assert metrics == {
        "evidence_quotes_a_document": {
            "scope": "turn",
            "ran": 2,
            "passed": 1,
            "failed": 1,
            "pass_rate": 0.5,
            "turns": 2,
            "turns_failed": 1,
            "per_task_type": {
                "document_qa": {
                    "ran": 1,
                    "passed": 0,
                    "failed": 1,
                    "pass_rate": 0.0,
                    "turns": 1,
                    "turns_failed": 1,
                },
                "math": {"ran": 1, "passed": 1, "failed": 0, "pass_rate": 1.0, "turns": 1, "turns_failed": 0},
            },
        },
        "search_found_documents": {
            "scope": "step",
            "ran": 3,
            "passed": 2,
            "failed": 1,
            "pass_rate": 2 / 3,
            "turns": 2,
            "turns_failed": 1,
            "per_task_type": {
                "document_qa": {
                    "ran": 1,
                    "passed": 1,
                    "failed": 0,
                    "pass_rate": 1.0,
                    "turns": 1,
                    "turns_failed": 0,
                },
                "math": {"ran": 2, "passed": 1, "failed": 1, "pass_rate": 0.5, "turns": 1, "turns_failed": 1},
            },
        },
    }


def test_a_name_used_at_step_and_turn_is_mixed_and_no_checks_is_empty():
    mixed = check_metrics([CheckRow(1, "qa", "x", "step", True), CheckRow(1, "qa", "x", "turn", True)])

    assert mixed["x"]["scope"] == "mixed"
    assert check_metrics([]) == {}


def test_event_data_that_is_not_a_check_is_skipped():
    assert check_row(
        turn_id=1, task_type="qa", data={"name": "a", "passed": True, "scope": "turn"}
    ) == CheckRow(1, "qa", "a", "turn", True)
    assert check_row(turn_id=1, task_type="qa", data={"name": "a", "passed": "yes"}) is None
    assert check_row(turn_id=1, task_type="qa", data={"passed": True}) is None


def test_the_table_shows_each_check_and_its_task_types():
    buffer = io.StringIO()
    Console(file=buffer, width=100, color_system=None).print(checks_table(check_metrics(rows())))
    text = buffer.getvalue()

    assert "evidence_quotes_a_document" in text and "50.0%" in text and "1/2" in text
    assert "  math" in text and "66.7%" in text
    assert checks_table({}) is None
    assert "Checks" in format_table({"checks": check_metrics(rows())})
    assert "Checks" not in format_table({"checks": {}})


def test_side_by_side_gives_each_runs_pass_rate_and_the_difference():
    base = check_metrics(rows())
    candidate = check_metrics(
        [
            CheckRow(7, "math", "evidence_quotes_a_document", "turn", True),
            CheckRow(8, "math", "new_check", "step", False),
        ]
    )

    side = checks_side_by_side(base, candidate)

    assert list(side) == ["evidence_quotes_a_document", "new_check", "search_found_documents"]
    assert side["evidence_quotes_a_document"] == {
        "base": {"scope": "turn", "ran": 2, "passed": 1, "failed": 1, "pass_rate": 0.5, "turns": 2},
        "candidate": {"scope": "turn", "ran": 1, "passed": 1, "failed": 0, "pass_rate": 1.0, "turns": 1},
        "difference": 0.5,
    }
    assert side["new_check"]["base"] is None and side["new_check"]["difference"] is None
    assert side["search_found_documents"]["candidate"] is None
