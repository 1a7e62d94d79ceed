"""``manage.py plan_eval`` and the smallest detectable difference every
comparison states (issue 43): in ``compare_runs``' text and ``--json``, the
API and the admin's comparison page; bad input exits 2."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from apikeys.services import apikey_create
from evaluation.compare.power import detectable_difference, independent_discordance, plan_sample_size
from evaluation.models import Prediction
from tests.api_support import ApiClient
from tests.evaluation.annotation.annotation_support import make_dataset, make_run, staff

pytestmark = pytest.mark.django_db


def test_plan_eval_prints_the_exact_plan_and_writes_it(tmp_path, capsys):
    out = tmp_path / "plan.json"
    call_command("plan_eval", "--baseline-accuracy", "0.6", "--detect", "0.1", "--json", str(out))
    text = capsys.readouterr().out
    expected = plan_sample_size(difference=0.1, discordance=independent_discordance(0.6, 0.1))
    assert expected.examples == 377  # the figure tests/evaluation/conformance simulates
    assert "examples needed: 377 paired (exact power 80.1%)" in text
    assert f"Connor (1987) normal approximation: {expected.connor}" in text
    assert "exact McNemar test" in text and "errors independent" in text
    plan = json.loads(out.read_text())
    assert plan["examples"] == 377 and plan["pairs"] == 1 and plan["alpha_per_pair"] == 0.05

    call_command(
        "plan_eval", "--baseline-accuracy", "0.6", "--detect", "0.1", "--discordance", "0.2",
        "--variants", "4", "--epochs", "3",
    )  # fmt: skip
    text = capsys.readouterr().out
    four = plan_sample_size(difference=0.1, discordance=0.2, variants=4)
    assert four.alpha_per_pair == pytest.approx(0.05 / 6)
    assert f"examples needed: {four.examples:,} paired" in text and "4 variants = 6 pair(s)" in text
    assert f"with 3 epochs: between {-(-four.examples // 3):,} examples" in text


def test_plan_eval_reads_the_accuracy_and_discordance_from_a_run(capsys):
    dataset = make_dataset(n=20)
    run = make_run(dataset, "two-epochs", right=set(range(14)))  # epoch 1: 14/20 = 70 %
    # epoch 2: examples 0..9 right again, 10..13 now wrong, 14..15 now right: 6 of 20 disagree
    Prediction.objects.bulk_create(
        Prediction(
            run=run, example=p.example, task_type=p.task_type, epoch=2, scorer="exact", stop_reason="final",
            correct=(i < 10 or i in (14, 15)), completed_at=timezone.now(),
        )
        for i, p in enumerate(run.predictions.order_by("example__position"))
    )  # fmt: skip
    call_command("plan_eval", "--run", "two-epochs", "--detect", "0.1")
    text = capsys.readouterr().out
    expected = plan_sample_size(difference=0.1, discordance=0.3)
    assert "from 70.0% (run two-epochs: accuracy 14/20 scored (epoch 1)" in text
    assert "discordance 0.300" in text and f"examples needed: {expected.examples:,}" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline-accuracy", "0.6", "--detect", "0"], "--detect must be a number in (0, 1)"),
        (["--baseline-accuracy", "0.6", "--detect", "1"], "--detect must be a number in (0, 1)"),
        (["--baseline-accuracy", "0.6", "--detect", "1.5"], "--detect must be a number in (0, 1)"),
        (["--baseline-accuracy", "0", "--detect", "0.1"], "--baseline-accuracy must be a number in (0, 1)"),
        (["--baseline-accuracy", "1.2", "--detect", "0.1"], "--baseline-accuracy must be a number in (0, 1)"),
        (["--baseline-accuracy", "nan", "--detect", "0.1"], "--baseline-accuracy must be a number in (0, 1)"),
        (["--detect", "0.1"], "give --baseline-accuracy P"),
        (["--baseline-accuracy", "0.6"], "--detect D is required"),
        (["--baseline-accuracy", "0.6", "--detect", "0.1", "--discordance", "0.05"], "below the difference"),
        (["--baseline-accuracy", "0.6", "--detect", "0.1", "--variants", "1"], "--variants must be >= 2"),
        (["--baseline-accuracy", "0.6", "--detect", "0.1", "--alpha", "1"], "--alpha must be"),
        (["--baseline-accuracy", "0.6", "--detect", "0.1", "--power", "0"], "--power must be"),
        (["--run", "nope", "--detect", "0.1"], "run 'nope' not found"),
    ],
)
def test_bad_input_exits_2(argv, message):
    with pytest.raises(CommandError) as caught:
        call_command("plan_eval", *argv)
    assert caught.value.returncode == 2
    assert message in str(caught.value)


@pytest.fixture
def pair():
    """Two runs on 40 examples: the candidate fixes 6 and breaks 2 (not significant)."""
    dataset = make_dataset(n=40)
    make_run(dataset, "base", right=set(range(20)) | {30, 31})
    make_run(dataset, "cand", right=set(range(20)) | set(range(32, 38)))
    return dataset


def test_every_comparison_says_what_it_could_have_detected(pair, tmp_path, capsys):
    expected = detectable_difference(40, discordant=8)
    assert expected is not None
    out = tmp_path / "c.json"
    call_command("compare_runs", "base", "cand", "--json", str(out))
    text = " ".join(capsys.readouterr().out.split())
    detectable = json.loads(out.read_text())["detectable"]
    assert detectable["difference"] == pytest.approx(expected)
    assert (detectable["examples"], detectable["discordant"]) == (40, 8)
    note = f"not significant (p = 0.29, alpha 0.05); this comparison could detect ±{expected * 100:.1f} pp"
    assert detectable["note"].startswith(note)
    assert f"overall: {note} with 80% power" in text

    owner = staff("owner")
    _, raw = apikey_create(name="ci")
    body = ApiClient(api_key=raw).get("/api/runs/base/compare/cand").json()
    assert body["detectable"]["difference"] == pytest.approx(expected)

    client = Client()
    client.force_login(owner)
    from evaluation.admin.regressions import compare_url
    from evaluation.models import Run

    page = client.get(
        compare_url(Run.objects.get(run_id="base").pk, Run.objects.get(run_id="cand").pk)
    ).content.decode()
    assert 'id="detectable"' in page and f"could detect ±{expected * 100:.1f} pp" in page
