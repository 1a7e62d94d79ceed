"""The command that resumes a run (issue 18): every word shell-quoted, the
options a resume must repeat repeated. (Exit 75 itself, across a real
database restart: ``tests/faults/test_restarts.py``.)"""

from __future__ import annotations

import shlex

from evaluation.run_exits import resume_command

DEFAULTS = {"concurrency": 4, "plugins": [], "mcp": [], "review": True, "retry_errors": False}


def test_a_run_id_with_spaces_and_quotes_pastes_back_as_it_was():
    command = resume_command(
        dataset="my data/set.jsonl", run_id="nightly 'big' run", options={**DEFAULTS}, defaults=DEFAULTS
    )
    words = shlex.split(command)
    assert words[1:] == ["manage.py", "run_eval", "my data/set.jsonl", "--run-id", "nightly 'big' run"]
    assert "'nightly '\"'\"'big'\"'\"' run'" in command  # shlex.quote's form


def test_options_that_differ_from_their_defaults_are_repeated():
    options = {
        **DEFAULTS,
        "concurrency": 8,
        "limit": 20,
        "plugins": ["a", "b"],
        "mcp": ["calc=python -m x"],
        "review": False,
        "price_in": 0.5,
        "price_out": 1.5,
        "celery": True,
        "queue": "nightly",
        "max_in_flight": 16,
    }
    words = shlex.split(resume_command(dataset="demo", run_id="r1", options=options, defaults=DEFAULTS))
    assert words[1:] == [
        "manage.py", "run_eval", "demo", "--run-id", "r1", "--limit", "20", "--concurrency", "8",
        "--queue", "nightly", "--max-in-flight", "16", "--price-in", "0.5", "--price-out", "1.5",
        "--plugin", "a", "--plugin", "b", "--mcp", "calc=python -m x", "--no-review", "--celery",
    ]  # fmt: skip
