"""``manage.py annotation_queue create|import`` and ``manage.py judge_report``
(issue 30): exit 2 with the reason and nothing written on bad input; the CSV
file checked whole first, a bad row named by its line."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from evaluation.models import AnnotationQueue, HumanLabel
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def judged():
    dataset = make_dataset(n=6)
    exact = make_run(dataset, "hq-exact", right={0, 1})
    grades = {0: "correct", 1: "correct", 2: "correct", 3: "partial", 4: "incorrect", 5: "incorrect"}
    return make_run(dataset, "hq-judge", right={0, 1}, judge=grades, rescored_from=exact)


def test_create_then_import_then_report(judged, tmp_path, capsys):
    staff("ann")
    call_command(
        "annotation_queue", "create", "hq-judge", "--name", "Q", "--filter", "all", "--tags", "format,gave up"
    )
    assert "queue Q" in capsys.readouterr().out and AnnotationQueue.objects.get().items.count() == 6
    rows = [
        "question_id,reviewer,label,tags,note",
        "q0,ann,correct,,",
        "q1,ann,correct,,",
        "q2,ann,incorrect,format,says town 2",
        "q3,ann,partial,,",
        "q4,ann,incorrect,gave up;format,",
        "q5,ann,correct,,the passage agrees",
    ]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    call_command("annotation_queue", "import", "Q", str(tmp_path / "labels.csv"))
    assert "6 label(s) imported" in capsys.readouterr().out
    out_json = tmp_path / "report.json"
    call_command("judge_report", "hq-judge", "--json", str(out_json))
    text = capsys.readouterr().out
    assert "agreement: 66.7%" in text and "human-verified accuracy: 50.0% (3/6" in text
    report = json.loads(out_json.read_text())
    assert report["items"] == 6 and report["agreement"] == pytest.approx(4 / 6)
    assert report["confusion"]["table"] == [[2, 0, 1], [0, 1, 0], [1, 0, 1]]
    assert report["kappa_ci_low"] < report["kappa"] < report["kappa_ci_high"]
    assert report["human"]["tags"] == {"format": 2, "gave up": 1}


def test_a_bad_csv_row_is_named_by_its_line_and_nothing_is_written(judged, tmp_path):
    staff("ann")
    staff("guest", is_staff=False)
    call_command("annotation_queue", "create", "hq-judge", "--name", "Q")
    cases = {
        "q0,ann,correct\nq1,ann,superb\n": "line 3: label 'superb' is not in the rubric",
        "q0,ann,correct\nq9,ann,correct\n": "line 3: question_id 'q9' is not an item of queue 'Q'",
        "q0,guest,correct\n": "line 2: reviewer 'guest' is not an active staff user",
        "q0,nobody,correct\n": "line 2: no user named 'nobody'",
        "q0,ann,correct\nq0,ann,incorrect\n": "line 3: question_id 'q0' is labelled twice by 'ann'",
    }
    for body, message in cases.items():
        path = tmp_path / "labels.csv"
        path.write_text("question_id,reviewer,label\n" + body)
        with pytest.raises(CommandError) as excinfo:
            call_command("annotation_queue", "import", "Q", str(path))
        assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    (tmp_path / "cols.csv").write_text("id,who,label\nq0,ann,correct\n")
    with pytest.raises(CommandError, match="line 1: columns must be"):
        call_command("annotation_queue", "import", "Q", str(tmp_path / "cols.csv"))
    assert HumanLabel.objects.count() == 0


def test_bad_commands_exit_2_and_write_nothing(judged):
    for argv, message in [
        (["annotation_queue", "create", "nope", "--name", "Q"], "no run with id 'nope'"),
        (
            ["annotation_queue", "create", "hq-judge", "--name", "Q", "--sample", "0"],
            "--sample must be at least 1",
        ),
        (["annotation_queue", "create", "hq-judge", "--name", "Q", "--labels", ",,"], "names no label"),
        (["annotation_queue", "import", "nope", "x.csv"], "no annotation queue named 'nope'"),
        (["judge_report", "nope"], "no run with id 'nope'"),
        (["judge_report", "hq-judge"], "has no human label"),
    ]:
        with pytest.raises(CommandError) as excinfo:
            call_command(*argv)
        assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    assert AnnotationQueue.objects.count() == 0
