"""The judge-corrected accuracy (issue 43): ``judge_report`` and the alignment
page put the judge's accuracy, the human-verified accuracy and the
prediction-powered estimate side by side, from a queue drawn as a uniform
random sample; a queue drawn by a filter is refused (exit 2)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from evaluation.annotation.labelling import give_label
from evaluation.annotation.queues import create_queue
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff

pytestmark = pytest.mark.django_db

#: 60 examples: the judge calls 0..44 correct (45/60 = 75 %); the truth is 0..35 (the judge
#: also passes 36..44, wrongly)
JUDGE_CORRECT = set(range(45))
TRULY_CORRECT = set(range(36))


@pytest.fixture
def judged():
    dataset = make_dataset(n=60)
    grades = {i: "correct" if i in JUDGE_CORRECT else "incorrect" for i in range(60)}
    return make_run(dataset, "judged", right=TRULY_CORRECT, judge=grades)


def _label_truthfully(queue) -> None:
    ann = staff("ann")
    for item in queue.items.select_related("prediction__example"):
        index = int(item.prediction.example.external_id[1:])
        give_label(item, ann, "correct" if index in TRULY_CORRECT else "incorrect")


def _expected(queue) -> tuple[float, int]:
    """PPI with λ = 1 by hand: the judge's mean on the unlabelled plus the mean human − judge
    on the labelled."""
    labelled = {
        int(i.prediction.example.external_id[1:]) for i in queue.items.select_related("prediction__example")
    }
    unlabelled = [i for i in range(60) if i not in labelled]
    judge_mean = sum(i in JUDGE_CORRECT for i in unlabelled) / len(unlabelled)
    rectifier = sum((i in TRULY_CORRECT) - (i in JUDGE_CORRECT) for i in labelled) / len(labelled)
    return judge_mean + rectifier, len(labelled)


def test_judge_report_shows_the_three_accuracies_from_a_random_queue(judged, tmp_path, capsys):
    queue = create_queue("judged", name="random30", filter_name="all", sample=30, seed=5)
    _label_truthfully(queue)
    out = tmp_path / "report.json"
    call_command("judge_report", "judged", "--json", str(out))
    text = capsys.readouterr().out
    corrected = json.loads(out.read_text())["corrected"]
    estimate, labelled = _expected(queue)
    assert corrected["available"] is True and corrected["queues"] == ["random30"]
    assert (corrected["labelled"], corrected["unlabelled"], corrected["unscored"]) == (labelled, 30, 0)
    assert corrected["judge_accuracy"] == pytest.approx(45 / 60)
    assert corrected["estimate"] == pytest.approx(estimate)
    assert corrected["lam"] == 1.0
    assert corrected["ci_low"] < corrected["estimate"] < corrected["ci_high"]
    assert "judge's accuracy:        75.0%" in text
    assert f"judge-corrected (PPI):   {estimate:.1%}" in text
    assert "30 human labels" in text and "unbiased" in text
    # the queue named explicitly gives the same
    call_command("judge_report", "judged", "--queue", "random30", "--json", str(out))
    assert json.loads(out.read_text())["corrected"]["estimate"] == pytest.approx(estimate)


def test_a_queue_drawn_by_a_filter_is_refused_for_the_correction(judged, tmp_path):
    wrong = create_queue("judged", name="wrongs", filter_name="wrong")
    _label_truthfully(wrong)
    out = tmp_path / "report.json"
    with pytest.raises(CommandError) as caught:
        call_command("judge_report", "judged", "--queue", "wrongs", "--json", str(out))
    assert caught.value.returncode == 2
    assert "--filter wrong" in str(caught.value) and "uniform random sample" in str(caught.value)
    assert not out.exists()
    with pytest.raises(CommandError) as caught:
        call_command("judge_report", "judged", "--queue", "no such queue")
    assert caught.value.returncode == 2 and "no annotation queue named 'no such queue'" in str(caught.value)
    # without --queue, the report is made and says why there is no correction
    call_command("judge_report", "judged", "--json", str(out))
    corrected = json.loads(out.read_text())["corrected"]
    assert corrected["available"] is False and "uniform random sample" in corrected["reason"]


def test_the_alignment_page_explains_the_three_accuracies(judged):
    queue = create_queue("judged", name="random30", filter_name="all", sample=30, seed=5)
    _label_truthfully(queue)
    estimate, _ = _expected(queue)
    client = Client()
    client.login(username="ann", password="pw-ann-123")
    page = client.get(reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk])).content.decode()
    assert 'id="corrected-accuracy"' in page and "Accuracy three ways" in page
    assert f"<strong>{estimate:.3f}</strong>" in page
    assert "judge&#x27;s verdicts on every prediction, corrected by the judge&#x27;s errors" in page
    assert "Rests on 30 human labels from the random queue(s) random30" in page
