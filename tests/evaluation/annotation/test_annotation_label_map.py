"""A queue with its own labels (issue 47, item 7): ``judge_report`` compares
them with the automatic verdicts through the map given when the queue was
made (``--label-map good=correct,bad=incorrect``), or refuses with exit 2
and a message naming the queue — never a silent 0 % agreement."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from evaluation.annotation.alignment import human_accuracy
from evaluation.models import AnnotationQueue, Run
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff

pytestmark = pytest.mark.django_db

#: The judge's grades of q0–q4: three correct, two incorrect (automatic accuracy 60 %).
GRADES = {0: "correct", 1: "correct", 2: "correct", 3: "incorrect", 4: "incorrect"}
#: ann's labels: she agrees on q0, q1, q3, q4 and calls q2 bad.
LABELS = ["good", "good", "bad", "bad", "bad"]


@pytest.fixture
def judged() -> Run:
    dataset = make_dataset(n=5)
    exact = make_run(dataset, "lm-exact", right={0, 1, 2})
    staff("ann")
    return make_run(dataset, "lm-judge", right={0, 1, 2}, judge=GRADES, rescored_from=exact)


def _label(tmp_path, queue: str) -> None:
    rows = ["question_id,reviewer,label", *(f"q{i},ann,{label}" for i, label in enumerate(LABELS))]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    call_command("annotation_queue", "import", queue, str(tmp_path / "labels.csv"))


def test_a_mapped_queue_is_compared_through_its_map(judged, tmp_path, capsys):
    call_command(
        "annotation_queue", "create", "lm-judge", "--name", "Q", "--labels", "good,bad",
        "--label-map", "good=correct,bad=incorrect",
    )  # fmt: skip
    assert AnnotationQueue.objects.get(name="Q").label_map == {"good": "correct", "bad": "incorrect"}
    _label(tmp_path, "Q")
    call_command("judge_report", "lm-judge", "--json", str(tmp_path / "r.json"))
    text = capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["items"], report["agreement"]) == (5, pytest.approx(0.8))
    assert report["confusion"]["classes"] == ["correct", "incorrect"]
    assert report["confusion"]["table"] == [[2, 1], [0, 2]]
    assert [(d["question_id"], d["automatic"], d["human"]) for d in report["disagreements"]] == [
        ("q2", "correct", "incorrect")
    ]
    assert report["kappa"] == pytest.approx((0.8 - (0.6 * 0.4 + 0.4 * 0.6)) / (1 - 0.48))
    assert report["human"]["human_accuracy"] == pytest.approx(0.4) and report["human"]["unmapped"] == 0
    assert "agreement: 80.0%" in text and "human-verified accuracy: 40.0% (2/5" in text


def test_an_unmapped_queue_is_refused_with_exit_2_not_a_silent_zero(judged, tmp_path):
    call_command("annotation_queue", "create", "lm-judge", "--name", "Q", "--labels", "good,bad")
    _label(tmp_path, "Q")
    with pytest.raises(CommandError) as excinfo:
        call_command("judge_report", "lm-judge")
    assert excinfo.value.returncode == 2
    assert str(excinfo.value) == (
        "queue 'Q' has its own labels (good, bad) and no mapping to correct/partial/incorrect, so they "
        "cannot be compared with the automatic verdicts; make the queue with --label-map "
        "LABEL=VERDICT,... (e.g. good=correct,bad=incorrect)"
    )
    human = human_accuracy(judged)  # the run report: left out and counted, not 0 %
    assert (human["labelled"], human["human_accuracy"], human["unmapped"]) == (0, None, 5)


@pytest.mark.parametrize(
    ("label_map", "message"),
    [
        ("good=correct", "--label-map leaves label(s) ['bad'] unmapped"),
        ("good=correct,bad=wrong", "--label-map maps {'bad': 'wrong'}: each label maps to one of"),
        ("good=correct,bad=incorrect,meh=partial", "names label(s) ['meh'] that are not in the label set"),
        ("good", "give LABEL=VERDICT pairs separated by commas, got 'good'"),
        ("good=correct,good=partial", "label 'good' is mapped twice"),
    ],
)
def test_a_bad_label_map_is_exit_2_and_makes_no_queue(judged, label_map, message):
    with pytest.raises(CommandError) as excinfo:
        call_command(
            "annotation_queue", "create", "lm-judge", "--name", "Q", "--labels", "good,bad",
            "--label-map", label_map,
        )  # fmt: skip
    assert excinfo.value.returncode == 2 and message in str(excinfo.value)
    assert not AnnotationQueue.objects.exists()
