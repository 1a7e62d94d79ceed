"""``compare_runs A B --slices [--fdr Q]`` (issue 43): every slice's paired
difference tested, Benjamini–Hochberg over all of them, the slices where B is
worse listed with their counts; q-values equal statsmodels'; bad ``--fdr``
exits 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from statsmodels.stats.multitest import multipletests

from evaluation.compare.slices import bh_adjust, worse_p
from evaluation.models import Dataset, Example, Prediction, Run, RunStatus

pytestmark = pytest.mark.django_db

N = 80
#: the candidate breaks 12 of the 40 ``source = forum`` examples and fixes 2 ``textbook`` ones
BROKEN = set(range(40, 52))
FIXED = {5, 6}


def _source(i: int) -> str:
    return "forum" if i >= 40 else "textbook"


def _runs():
    dataset = Dataset.objects.create(name="sliced")
    Example.objects.bulk_create(
        Example(
            dataset=dataset, external_id=f"q{i}", position=i,
            question="What is " + "very " * (i % 7) + f"{i}?", answer=str(i), task_type="math",
            metadata={"source": _source(i), "level": ["easy", "hard"][i % 2]},
        )
        for i in range(N)
    )  # fmt: skip
    base = set(range(70)) - FIXED
    for run_id, right in (("A", base), ("B", (base - BROKEN) | FIXED)):
        run = Run.objects.create(
            run_id=run_id, dataset=dataset, status=RunStatus.SUCCESS, finished_at=timezone.now()
        )
        Prediction.objects.bulk_create(
            Prediction(
                run=run, example=e, task_type="math", scorer="numeric", correct=e.position in right,
                prediction="x", stop_reason="final", completed_at=timezone.now(),
            )
            for e in dataset.examples.all()
        )  # fmt: skip


def test_slices_list_where_the_candidate_is_worse_with_bh_q_values(tmp_path, capsys):
    _runs()
    out = tmp_path / "c.json"
    call_command("compare_runs", "A", "B", "--slices", "--json", str(out))
    text = " ".join(capsys.readouterr().out.split())
    report = json.loads(out.read_text())["slices"]
    # features: metadata.source (2), metadata.level (2), question length (quartiles); task type,
    # scorer and tools have one value each and are left out; two-feature cells of >= 20 examples
    slices = {r["slice"]: r for r in report["regressions"]}
    forum = slices["metadata.source = forum"]
    assert (forum["examples"], forum["broken"], forum["fixed"]) == (40, 12, 0)
    assert forum["difference"] == pytest.approx(-12 / 40)
    assert forum["p_value"] == pytest.approx(worse_p(fixed=0, broken=12)) == pytest.approx(0.5**12)
    assert all(r["difference"] < 0 and r["q_value"] < 0.1 for r in report["regressions"])
    assert "metadata.source = textbook" not in slices  # B fixed 2 there: not worse
    assert f"{report['tested']} slices tested" in text and "metadata.source = forum" in text
    assert report["tested"] >= 8 + 4  # 8 one-feature values, the 4 source × level cells at least

    # a stricter FDR keeps fewer (or as many) slices
    call_command("compare_runs", "A", "B", "--slices", "--fdr", "0.001", "--json", str(out))
    strict = json.loads(out.read_text())["slices"]
    assert strict["tested"] == report["tested"]
    assert {r["slice"] for r in strict["regressions"]} <= set(slices)
    assert all(r["q_value"] < 0.001 for r in strict["regressions"])


def test_q_values_equal_statsmodels_fdr_bh():
    rng = np.random.default_rng(43)
    for m in (1, 2, 7, 50, 400):
        p = np.concatenate([rng.uniform(size=m - m // 3), rng.uniform(0, 0.01, size=m // 3)])
        p[rng.integers(0, m)] = p[0]  # a tie
        ours = bh_adjust(p.tolist())
        reference = multipletests(p, method="fdr_bh")[1]
        assert ours == pytest.approx(reference.tolist(), abs=1e-12)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slices", "--fdr", "0"], "--fdr must be a number in (0, 1)"),
        (["--slices", "--fdr", "1"], "--fdr must be a number in (0, 1)"),
        (["--slices", "--fdr", "-0.2"], "--fdr must be a number in (0, 1)"),
        (["--slices", "--fdr", "ten"], "--fdr must be a number in (0, 1)"),
        (["--fdr", "0.1"], "--fdr applies to --slices"),
    ],
)
def test_a_bad_fdr_exits_2(argv, message):
    _runs()
    with pytest.raises(CommandError) as caught:
        call_command("compare_runs", "A", "B", *argv)
    assert caught.value.returncode == 2 and message in str(caught.value)


def test_the_comparison_page_shows_the_regression_slices():
    from django.test import Client

    from evaluation.admin.regressions import compare_url
    from tests.evaluation.annotation.annotation_support import staff

    _runs()
    client = Client()
    client.force_login(staff("owner"))
    page = client.get(
        compare_url(Run.objects.get(run_id="A").pk, Run.objects.get(run_id="B").pk)
    ).content.decode()
    assert 'id="regression-slices"' in page
    assert '<tr><td>metadata.source = forum</td><td class="num">40</td>' in page
    assert "slices tested" in page
