"""An experiment's leaderboard (issue 29): the ranking, every pair compared
(exact McNemar, or the paired bootstrap with epochs) and Holm-adjusted across
the pairs, the top group, the Pareto frontier, unfinished variants; then
``manage.py leaderboard``, ``GET /api/experiments/{name}`` and the admin's
leaderboard page.

The experiments are built from rows (a dataset, its examples, a run per
variant with a prediction per example and epoch, right or wrong as chosen),
their metrics computed by ``run_metrics`` as ``run_finish`` stores them; the
expected p-values come from statsmodels, not from the code under test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from evaluation.admin.regressions import compare_url
from evaluation.admin.report import report_url
from evaluation.experiments.experiment_file import slug
from evaluation.experiments.leaderboard_table import leaderboard_text
from evaluation.experiments.ranking import leaderboard, leaderboard_json
from evaluation.models import Dataset, Example, Experiment, Prediction, Run, RunStatus
from evaluation.selectors import run_metrics
from tests.api_support import ApiClient, assert_error

pytestmark = pytest.mark.django_db

#: which examples a variant gets right: a set of example indexes, or a
#: function of (index, epoch)
Right = set[int] | Callable[[int, int], bool]


def make_dataset(name: str = "sums", n: int = 40) -> Dataset:
    """A dataset of ``n`` examples, ``q0``…, the even ones ``math``, the odd ones ``lookup``."""
    dataset = Dataset.objects.create(name=name)
    Example.objects.bulk_create(
        Example(
            dataset=dataset,
            external_id=f"q{i}",
            position=i,
            question=f"What is {i} plus {i}?",
            answer=str(2 * i),
            task_type="math" if i % 2 == 0 else "lookup",
        )
        for i in range(n)
    )
    return dataset


def make_experiment(name: str, dataset: Dataset, *, alpha: float = 0.05) -> Experiment:
    return Experiment.objects.create(name=name, slug=slug(name), dataset=dataset, alpha=alpha)


def add_variant(
    experiment: Experiment,
    name: str,
    right: Right,
    *,
    cost: float | None = 0.001,
    status: str = RunStatus.SUCCESS,
    epochs: int = 1,
    done: int | None = None,
) -> Run:
    """A variant's run: a prediction per example and epoch (the first
    ``done`` examples only, when given), right as ``right`` says, each costing
    ``cost`` USD (``None``: unknown), and its metrics stored."""
    run = Run.objects.create(
        run_id=f"{experiment.slug}.{slug(name)}",
        dataset=experiment.dataset,
        status=status,
        experiment=experiment,
        variant=name,
        config={"model": f"model-{slug(name)}", "variant": {"name": name, "options": {"model": name}}},
        finished_at=timezone.now() if status != RunStatus.STARTED else None,
    )
    examples = list(experiment.dataset.examples.order_by("position"))[:done]
    rows = []
    for i, example in enumerate(examples):
        for epoch in range(1, epochs + 1):
            correct = right(i, epoch) if callable(right) else i in right
            rows.append(
                Prediction(
                    run=run,
                    example=example,
                    task_type=example.task_type,
                    prediction=str(2 * i) if correct else "nope",
                    gold_answer=example.answer,
                    scorer="numeric",
                    score=float(correct),
                    correct=correct,
                    steps=1,
                    input_tokens=100,
                    output_tokens=20,
                    cost=cost,
                    stop_reason="final",
                    latency_ms=1000 + 10 * i,
                    epoch=epoch,
                    completed_at=timezone.now(),
                )
            )
    Prediction.objects.bulk_create(rows)
    run.metrics = run_metrics(run=run)
    run.save(update_fields=["metrics"])
    return run


def first(n: int) -> set[int]:
    return set(range(n))


def mcnemar_p(a_right: Iterable[bool], b_right: Iterable[bool]) -> float:
    """The exact McNemar p-value of two runs' right/wrong per example, by statsmodels."""
    pairs = list(zip(a_right, b_right, strict=True))
    table = [
        [sum(a and b for a, b in pairs), sum(a and not b for a, b in pairs)],
        [sum(b and not a for a, b in pairs), sum(not a and not b for a, b in pairs)],
    ]
    return float(mcnemar(table, exact=True).pvalue)


@pytest.fixture
def abc() -> Experiment:
    """40 examples: A right on 30 (q0–q29), B on 29 (q1–q29), C on 5 (q0–q4);
    A costs the most, C the least."""
    experiment = make_experiment("Models A/B", make_dataset())
    add_variant(experiment, "C", first(5), cost=0.0005)
    add_variant(experiment, "B", set(range(1, 30)), cost=0.001)
    add_variant(experiment, "A", first(30), cost=0.002)
    return experiment


def test_variants_are_ranked_best_first_with_their_figures(abc):
    board = leaderboard(abc)
    assert [v.name for v in board.variants] == ["A", "B", "C"]
    assert [v.rank for v in board.variants] == [1, 2, 3]
    a = board.variants[0]
    assert (a.accuracy, a.n, a.correct, a.interval) == (0.75, 40, 30, "wilson")
    # the Wilson interval of 30/40 (Wilson 1927), as statsmodels gives it
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(30, 40, alpha=0.05, method="wilson")
    assert (a.ci_low, a.ci_high) == (pytest.approx(low), pytest.approx(high))
    assert a.cost == pytest.approx(0.08) and a.cost_per_correct == pytest.approx(0.08 / 30)
    assert a.tokens == {"input": 4000, "output": 800}
    assert a.latency_p50_s == pytest.approx(np.percentile([1000 + 10 * i for i in range(40)], 50) / 1000)
    assert a.latency_p95_s == pytest.approx(np.percentile([1000 + 10 * i for i in range(40)], 95) / 1000)
    assert a.stop_reasons == {"final": 40} and a.errors == 0
    # per task type: A is right on q0–q29, 15 even (math) and 15 odd (lookup) of 20 each
    assert a.per_task_type["math"]["accuracy"] == 0.75 and a.per_task_type["math"]["n"] == 20
    assert board.variants[1].per_task_type["math"]["accuracy"] == pytest.approx(14 / 20)
    assert board.variants[1].per_task_type["lookup"]["accuracy"] == pytest.approx(15 / 20)


def test_each_pair_is_exact_mcnemar_and_holm_adjusted_across_all_pairs(abc):
    board = leaderboard(abc)
    right = {
        "A": [i < 30 for i in range(40)],
        "B": [1 <= i < 30 for i in range(40)],
        "C": [i < 5 for i in range(40)],
    }
    assert [(p.a, p.b) for p in board.pairs] == [("A", "B"), ("A", "C"), ("B", "C")]
    expected = [mcnemar_p(right[p.a], right[p.b]) for p in board.pairs]
    assert [p.p_value for p in board.pairs] == pytest.approx(expected)
    # A–B: q0 only A, none only B: one discordant example
    assert board.pairs[0].p_value == pytest.approx(1.0)
    assert board.pairs[1].p_value == pytest.approx(2 * 0.5**25)
    holm = multipletests(expected, method="holm")[1]
    assert [p.p_holm for p in board.pairs] == pytest.approx(list(holm))
    assert [p.difference for p in board.pairs] == pytest.approx([1 / 40, 25 / 40, 24 / 40])
    assert [p.n for p in board.pairs] == [40, 40, 40]
    assert {p.test for p in board.pairs} == {"exact McNemar"}
    # what each pair could detect with 80 % power, at alpha over the 3 pairs (Holm's first step)
    from evaluation.compare.power import detectable_difference

    discordant = [1, 25, 26]  # A–B: q0; A–C: q5..q29; B–C: q0 and q5..q29
    assert [p.detectable for p in board.pairs] == pytest.approx(
        [detectable_difference(40, discordant=d, alpha=0.05, pairs=3) for d in discordant]
    )
    assert all(p.detectable is not None and 0 < p.detectable < 1 for p in board.pairs)


def test_the_top_group_holds_the_variants_tied_with_the_best(abc):
    board = leaderboard(abc)
    assert board.top_group == ["A", "B"]
    assert [v.top_group for v in board.variants] == [True, True, False]
    # at a level below C's Holm-adjusted p, C is not significantly worse either
    assert leaderboard(abc, alpha=1e-9).top_group == ["A", "B", "C"]


def test_the_pareto_frontier_leaves_out_dominated_variants_and_unknown_costs():
    experiment = make_experiment("Costs", make_dataset(n=20))
    add_variant(experiment, "cheap", first(15), cost=0.002)  # 75 %, $0.04
    add_variant(experiment, "same but dearer", first(15), cost=0.003)  # 75 %, $0.06: dominated
    add_variant(experiment, "worse and dearer", first(10), cost=0.004)  # 50 %, $0.08: dominated
    add_variant(experiment, "best", first(18), cost=0.01)  # 90 %, $0.20
    add_variant(experiment, "cheapest", first(4), cost=0.0005)  # 20 %, $0.01
    add_variant(experiment, "unpriced", first(19), cost=None)  # 95 %, cost unknown
    board = leaderboard(experiment)

    assert [v.name for v in board.variants] == [
        "unpriced",
        "best",
        "cheap",
        "same but dearer",
        "worse and dearer",
        "cheapest",
    ]
    assert board.frontier == ["cheapest", "cheap", "best"]  # ascending cost
    assert board.cost_unknown == ["unpriced"]
    assert {v.name: v.pareto for v in board.variants} == {
        "unpriced": False,
        "best": True,
        "cheap": True,
        "same but dearer": False,
        "worse and dearer": False,
        "cheapest": True,
    }
    unpriced = board.variants[0]
    assert unpriced.cost is None and unpriced.cost_per_correct is None
    text = leaderboard_text(board)
    assert "cost unknown, so not on the frontier: unpriced" in text
    # with uncertainty (issue 43): every example costs the same here, so each cost interval is a
    # point; the accuracies' Wilson intervals decide the rest. cheap (75 %, $0.04) could be as
    # accurate as best (90 %: Wilson 0.70–0.97; cheap's reaches 0.89) for less: best's place is
    # open; nothing cheaper could reach cheap's or cheapest's accuracy, so theirs is decided;
    # nothing dominates "same but dearer" or "worse and dearer" for certain
    by_name = {v.name: v for v in board.variants}
    assert by_name["cheap"].cost_per_example == pytest.approx(0.002)
    assert by_name["cheap"].cost_ci == pytest.approx((0.002, 0.002))
    assert board.frontier_undecided == ["best", "same but dearer", "worse and dearer"]
    assert "not decided by the intervals (more examples could move it): best, same but dearer" in text
    assert leaderboard_json(board)["variants"][1]["cost_per_example_ci"] == pytest.approx([0.01, 0.01])


def test_the_frontier_uncertainty_rules():
    from evaluation.experiments.frontier import cost_interval, frontier_undecided

    def point(name, acc, cost):
        return {
            "name": name,
            "acc_low": acc[0],
            "acc_high": acc[1],
            "cost_low": cost[0],
            "cost_high": cost[1],
        }

    # B's cost interval reaches below A's upper bound and its accuracy reaches A's: A's place is open
    points = [
        point("A", (0.6, 0.8), (1.0, 2.0)),
        point("B", (0.7, 0.9), (1.8, 3.0)),
        point("C", (0.1, 0.2), (5, 6)),
    ]
    assert frontier_undecided(points, {"A", "B"}) == ["A", "B"]
    # far apart, everything is decided; C is dominated for certain by A
    points[1] = point("B", (0.85, 0.95), (4.0, 4.5))
    assert frontier_undecided(points, {"A", "B"}) == []
    # the bootstrap interval of a mean cost holds the mean and is seeded (the same every time)
    interval = cost_interval([0.001, 0.002, 0.003, 0.010] * 10)
    assert interval is not None and interval.low < interval.mean < interval.high
    assert interval.mean == pytest.approx(0.004)
    assert interval == cost_interval([0.001, 0.002, 0.003, 0.010] * 10)
    assert cost_interval([]) is None


def test_ties_in_accuracy_go_to_the_cheaper_variant_then_the_name():
    experiment = make_experiment("Ties", make_dataset(n=10))
    add_variant(experiment, "zeta", first(5), cost=0.001)
    add_variant(experiment, "alpha", first(5), cost=0.001)
    add_variant(experiment, "dear", first(5), cost=0.01)
    assert [v.name for v in leaderboard(experiment).variants] == ["alpha", "zeta", "dear"]


def _pattern(i: int, epoch: int) -> bool:
    """A variant with noisy epochs: example i is right in (i % 4) of 3 epochs (capped)."""
    return epoch <= min(i % 4, 3)


def test_epochs_rank_by_mean_accuracy_with_a_bootstrap_interval_and_pass_at_k():
    experiment = make_experiment("Epochs", make_dataset(n=12))
    add_variant(experiment, "steady", first(9), epochs=3)
    add_variant(experiment, "noisy", _pattern, epochs=3)
    board = leaderboard(experiment)

    steady, noisy = board.variants
    assert (steady.name, noisy.name) == ("steady", "noisy")
    means = [min(i % 4, 3) / 3 for i in range(12)]
    assert noisy.accuracy == pytest.approx(sum(means) / 12) and noisy.n == 12 and noisy.epochs == 3
    assert noisy.interval == "bootstrap"
    # the 95% percentile bootstrap of the mean over examples (Efron & Tibshirani 1993, ch. 13):
    # 10,000 resamples of the examples with numpy's generator seeded 0
    values = np.array(means)
    picks = np.random.default_rng(0).integers(0, 12, size=(10_000, 12))
    low, high = np.quantile(values[picks].mean(axis=1), [0.025, 0.975])
    assert (noisy.ci_low, noisy.ci_high) == (pytest.approx(low), pytest.approx(high))
    # pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k) per example, averaged
    for k in (1, 2, 3):
        expected = (
            sum(1 - math.comb(3 - c, k) / math.comb(3, k) for c in (min(i % 4, 3) for i in range(12))) / 12
        )
        assert noisy.pass_at_k is not None and noisy.pass_at_k[str(k)] == pytest.approx(expected)

    (pair,) = board.pairs
    assert pair.test == "paired bootstrap" and pair.n == 12
    assert pair.difference == pytest.approx(9 / 12 - sum(means) / 12)
    # the paired bootstrap's p over per-example means, centred under the null (+1 correction)
    diffs = np.array([float(i < 9) - m for i, m in enumerate(means)])
    picks = np.random.default_rng(0).integers(0, 12, size=(10_000, 12))
    centred = diffs[picks].mean(axis=1) - diffs.mean()
    expected_p = (np.count_nonzero(np.abs(centred) >= abs(diffs.mean()) - 1e-12) + 1) / 10_001
    assert pair.p_value == pytest.approx(expected_p) and pair.p_holm == pytest.approx(expected_p)
    text = leaderboard_text(board)
    assert "pass@3" in text and "paired bootstrap" in text


def test_an_unfinished_variant_is_listed_after_the_ranked_ones_without_significance():
    experiment = make_experiment("Partly run", make_dataset(n=10))
    add_variant(experiment, "done", first(6))
    add_variant(experiment, "going", first(10), status=RunStatus.STARTED, done=4)
    add_variant(experiment, "broken", first(10), status=RunStatus.ERROR)
    add_variant(experiment, "also done", first(3))
    board = leaderboard(experiment)

    assert [(v.name, v.rank, v.status) for v in board.variants] == [
        ("done", 1, "success"),
        ("also done", 2, "success"),
        ("broken", None, "error"),
        ("going", None, "started"),
    ]
    assert [(p.a, p.b) for p in board.pairs] == [("done", "also done")]
    assert board.top_group == ["done", "also done"]  # 3 discordant examples: McNemar p = 0.25
    assert "broken" not in board.top_group and "going" not in board.frontier
    going = board.variants[3]
    # an unfinished run shows no accuracy: its undriven examples are stored as errors until they run
    assert (going.accuracy, going.ci_low, going.n, going.top_group, going.pareto) == (
        None,
        None,
        4,
        False,
        False,
    )
    assert "not ranked (not finished): broken (error), going (started)" in leaderboard_text(board)


def test_one_variant_has_no_pairs():
    experiment = make_experiment("Alone", make_dataset(n=5))
    add_variant(experiment, "only", first(3))
    board = leaderboard(experiment)
    assert board.pairs == [] and board.top_group == ["only"] and board.frontier == ["only"]
    assert "one finished variant: no pairs to compare" in leaderboard_text(board)


# -- manage.py leaderboard --


def test_the_command_prints_the_table_and_writes_the_json(abc, tmp_path, capsys):
    out = tmp_path / "board.json"
    call_command("leaderboard", "Models A/B", "--json", str(out))
    printed = capsys.readouterr().out
    document = json.loads(out.read_text(encoding="utf-8"))

    assert {
        "experiment",
        "dataset",
        "dataset_version",
        "alpha",
        "variants",
        "pairs",
        "top_group",
        "frontier",
    } <= set(document)
    assert (document["experiment"], document["dataset"], document["dataset_version"], document["alpha"]) == (
        "Models A/B",
        "sums",
        1,
        0.05,
    )
    assert [v["name"] for v in document["variants"]] == ["A", "B", "C"]
    a = document["variants"][0]
    assert {
        "name",
        "run_id",
        "status",
        "accuracy",
        "ci_low",
        "ci_high",
        "cost",
        "cost_per_correct",
        "top_group",
        "pareto",
        "per_task_type",
        "tokens",
        "latency_p50_s",
        "latency_p95_s",
        "errors",
        "stop_reasons",
    } <= set(a)
    assert (a["run_id"], a["status"], a["accuracy"], a["top_group"], a["pareto"]) == (
        "models-a-b.a",
        "success",
        0.75,
        True,
        True,
    )
    assert a["cost"] == pytest.approx(0.08) and a["tokens"] == {"input": 4000, "output": 800}
    assert document["variants"][2]["top_group"] is False
    assert document["top_group"] == ["A", "B"] and document["frontier"] == ["C", "B", "A"]
    pair = document["pairs"][1]
    assert (pair["a"], pair["b"], pair["n"]) == ("A", "C", 40)
    assert pair["difference"] == pytest.approx(25 / 40) and pair["p_value"] == pytest.approx(2 * 0.5**25)
    assert pair["p_holm"] == pytest.approx(
        multipletests([1.0, 2 * 0.5**25, 2 * 0.5**24], method="holm")[1][1]
    )
    assert document == json.loads(json.dumps(leaderboard_json(leaderboard(abc))))

    assert "▲ top" in printed and "◆" in printed and "Holm (1979)" in printed and "exact McNemar" in printed
    lines = printed.splitlines()
    a_line = next(line for line in lines if " A " in line and "models-a-b" not in line and "75.0%" in line)
    assert "▲ top" in a_line
    assert "+62.5 pp" in printed  # A − C in the matrix


def test_the_command_takes_alpha(abc, capsys):
    call_command("leaderboard", "models-a-b", "--alpha", "1e-9")  # by slug
    printed = capsys.readouterr().out
    assert "alpha 1e-09" in printed
    c_line = next(line for line in printed.splitlines() if "12.5%" in line)
    assert "▲ top" in c_line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["Models A"],
            "no experiment named 'Models A'; did you mean 'Models A/B'? known experiments: 'Models A/B'",
        ),
        (["Models A/B", "--alpha", "abc"], "--alpha must be a number between 0 and 1"),
        (["Models A/B", "--alpha", "1.5"], "got '1.5'"),
        (["Models A/B", "--alpha", "0"], "got '0'"),
        (["Models A/B", "--alpha", "nan"], "got 'nan'"),
        (
            ["Models A/B", "--json", "/nonexistent-folder/board.json"],
            "folder /nonexistent-folder does not exist",
        ),
        (["Models A/B", "--json", "/tmp"], "is a folder"),
    ],
)
def test_the_command_exits_2_on_bad_input(abc, argv, message):
    with pytest.raises(CommandError) as excinfo:
        call_command("leaderboard", *argv)
    assert excinfo.value.returncode == 2
    assert message in str(excinfo.value)


def test_the_command_says_when_there_is_no_experiment_at_all():
    with pytest.raises(CommandError) as excinfo:
        call_command("leaderboard", "anything")
    assert excinfo.value.returncode == 2
    assert "there are no experiments yet" in str(excinfo.value)


# -- the API --


def test_api_returns_the_leaderboard_by_name(abc, owner):
    response = ApiClient(owner).get("/api/experiments/Models%20A/B")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["top_group"] == ["A", "B"] and body["frontier"] == ["C", "B", "A"]
    assert [v["name"] for v in body["variants"]] == ["A", "B", "C"]
    assert body["pairs"][1]["p_value"] == pytest.approx(2 * 0.5**25)
    expected = json.loads(json.dumps(leaderboard_json(leaderboard(abc))))
    assert body == expected
    assert ApiClient(owner).get("/api/experiments/models-a-b").json() == expected
    low = ApiClient(owner).get("/api/experiments/models-a-b?alpha=1e-9").json()
    assert low["alpha"] == 1e-9 and low["top_group"] == ["A", "B", "C"]


def test_api_404s_an_unknown_experiment_and_refuses_a_bad_alpha(abc, owner):
    error = assert_error(ApiClient(owner).get("/api/experiments/nope"), 404, "not_found")
    assert "no experiment named 'nope'" in error["message"] and "'Models A/B'" in error["message"]
    assert_error(ApiClient(owner).get("/api/experiments/models-a-b?alpha=2"), 422, "invalid")
    assert_error(ApiClient().get("/api/experiments/models-a-b"), 401, "unauthenticated")


# -- the admin --


@pytest.fixture
def admin_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def _chart(html: str) -> dict[str, Any]:
    return json.loads(html.split('id="leaderboard-data" type="application/json">')[1].split("</script>")[0])


def test_the_experiment_page_is_the_leaderboard(abc, admin_client):
    runs = {run.variant: run for run in abc.runs.all()}
    add_variant(abc, "D", first(40), status=RunStatus.STARTED, done=10)
    response = admin_client.get(reverse("admin:evaluation_experiment_change", args=[abc.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    rows = response.context["rows"]
    assert [r["v"].name for r in rows] == ["A", "B", "C", "D"]
    assert [r["accuracy"] for r in rows] == ["75.0%", "72.5%", "12.5%", "—"]  # D has not finished
    # each variant links to its run's report
    for name, run in runs.items():
        assert f'href="{report_url(run.pk)}" class="al-report-link">{name}</a>' in html
    # the best is marked top; B, worse but not significantly, is tied with it (not green)
    assert html.count('class="al-top"') == 1 and html.count('class="al-front"') == 3
    assert html.count('class="al-tied"') == 1
    # the matrix: row − column, each cell linked to the comparison with the column as the base
    matrix = response.context["matrix"]
    assert [row["name"] for row in matrix] == ["A", "B", "C"]
    a_c = matrix[0]["cells"][2]
    assert a_c["difference"] == "+62.5 pp" and a_c["significant"] is True
    assert a_c["p_holm"] == "1.8e-07"  # 3 · 2 · 0.5**25, the smallest of the three p-values
    assert a_c["url"] == compare_url(runs["C"].pk, runs["A"].pk)
    c_a = matrix[2]["cells"][0]
    assert c_a["difference"] == "-62.5 pp" and c_a["url"] == compare_url(runs["A"].pk, runs["C"].pk)
    assert a_c["detectable"].startswith("±") and f"could detect {a_c['detectable']}" in html
    assert matrix[1]["cells"][1] is None
    assert 'id="pairs"' in html and f'href="{compare_url(runs["C"].pk, runs["A"].pk)}"' in html
    assert html.count('class="al-pair') == 6
    # the chart's data: every finished variant a point, the frontier by ascending cost
    chart = _chart(html)
    assert [(p["name"], p["x"], p["y"]) for p in chart["points"]] == [
        ("A", pytest.approx(0.08), 0.75),
        ("B", pytest.approx(0.04), 0.725),
        ("C", pytest.approx(0.02), 0.125),
    ]
    assert [p["name"] for p in chart["frontier"]] == ["C", "B", "A"]
    assert 'id="chart-frontier"' in html and "evaluation/leaderboard.js" in html
    assert "vendor/chartjs/chart.umd.min.js" in html
    assert "Holm (1979)" in response.context["legend"]


def test_the_experiment_list_shows_dataset_variants_and_the_best(abc, admin_client):
    other = make_experiment("Empty", abc.dataset)
    response = admin_client.get(reverse("admin:evaluation_experiment_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "sums@1" in html
    assert (
        '<td class="field-variant_count">3</td>' in html and '<td class="field-variant_count">0</td>' in html
    )
    assert '<td class="field-best">A</td>' in html and '<td class="field-best">—</td>' in html
    assert reverse("admin:evaluation_experiment_change", args=[other.pk]) in html
    assert admin_client.get(reverse("admin:evaluation_experiment_add")).status_code == 403


def test_the_experiment_list_costs_the_same_queries_for_one_experiment_or_many(abc, admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    url = reverse("admin:evaluation_experiment_changelist")
    admin_client.get(url)  # warm the process-wide caches (content types)
    with CaptureQueriesContext(connection) as one:
        admin_client.get(url)
    for name in ("Second", "Third"):
        more = make_experiment(name, abc.dataset)
        add_variant(more, "X", first(3))
        add_variant(more, "Y", first(7))
    with CaptureQueriesContext(connection) as three:
        body = admin_client.get(url).content.decode()
    assert '<td class="field-best">Y</td>' in body
    assert len(three.captured_queries) == len(one.captured_queries)


def test_the_runs_list_and_the_report_say_which_experiment_and_variant(abc, admin_client):
    board_url = reverse("admin:evaluation_experiment_change", args=[abc.pk])
    listed = admin_client.get(reverse("admin:evaluation_run_changelist")).content.decode()
    assert f'<a href="{board_url}">Models A/B / A</a>' in listed
    filtered = admin_client.get(
        reverse("admin:evaluation_run_changelist") + f"?experiment__id__exact={abc.pk}"
    )
    assert filtered.status_code == 200 and filtered.context["cl"].result_count == 3
    run = abc.runs.get(variant="B")
    report = admin_client.get(report_url(run.pk)).content.decode()
    assert 'id="experiment-variant"' in report and f'href="{board_url}">Models A/B</a>' in report
    assert "Variant <strong>B</strong> of experiment" in report


def test_an_unknown_experiment_page_is_404(admin_client):
    assert admin_client.get(reverse("admin:evaluation_experiment_change", args=[999])).status_code == 404
