"""The leaderboard ranked by trajectory pass (issue 48: "rank by either"),
on the stub: two variants give the same answers by different paths on
examples with expected trajectories, so ranked by answer they tie and ranked
by trajectory one is significantly better — the exact McNemar p on
trajectory pass equals statsmodels', Holm-adjusted, and the top group
follows. Then ``manage.py leaderboard --rank-by``, ``?rank_by=`` on the admin
page, ``rank_by`` in the API and in the experiment file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from statsmodels.stats.contingency_tables import mcnemar

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply
from common.errors import BadInput
from evaluation.experiments.experiment_file import experiment_spec, slug
from evaluation.experiments.ranking import leaderboard, leaderboard_json
from evaluation.experiments.trajectory_ranking import TRAJECTORY_TEST
from evaluation.metrics.intervals import wilson_interval
from evaluation.models import Experiment, Run
from tests.api_support import ApiClient, assert_error

pytestmark = pytest.mark.django_db(transaction=True)

CALC = ("calculator", {"expression": "2+2"})
SEARCH = ("search_documents", {"query": "two plus two"})
#: nine examples expecting one calculator call, one with no expected trajectory
QUESTIONS = [f"What is 2+2? (case {i})" for i in range(9)]
PLAIN = "What is 2+2? (no path)"


def write_dataset(tmp_path: Path) -> Path:
    lines: list[dict[str, Any]] = [
        {
            "question_id": f"c{i}",
            "question": q,
            "answer": "4",
            "task_type": "math",
            "trajectory": [{"tool": CALC[0], "args": CALC[1]}],
        }
        for i, q in enumerate(QUESTIONS)
    ]
    lines.append({"question_id": "plain", "question": PLAIN, "answer": "4", "task_type": "math"})
    path = tmp_path / "paths.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def agent(searches: set[str]):
    """A stub agent answering 4 to everything, after one call: search for the
    questions in ``searches``, the calculator otherwise."""

    def handler(body: dict):
        question = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if not any(m["role"] == "tool" for m in body["messages"]):
            return tool_call_reply(*(SEARCH if question in searches else CALC))
        return final_answer_reply("4", "e", "r")

    return handler


def variant_run(
    endpoint, tmp_path: Path, experiment: Experiment | None, name: str, searches: set[str]
) -> Run:
    with StubLLMServer(agent(searches)) as server:
        endpoint(server)
        call_command("run_eval", "--no-review", str(write_dataset(tmp_path)), "--run-id", name)
    run = Run.objects.get(run_id=name)
    if experiment is None:
        experiment = Experiment.objects.create(name="paths", slug=slug("paths"), dataset=run.dataset)
    run.experiment, run.variant = experiment, name
    run.save(update_fields=["experiment", "variant"])
    return run


@pytest.fixture
def paths(endpoint, tmp_path) -> Experiment:
    """``direct`` searches on 7 of the 9 path examples (and on the plain one);
    ``tools`` always calls the calculator: the same answers, different paths."""
    direct = variant_run(endpoint, tmp_path, None, "direct", {*QUESTIONS[:7], PLAIN})
    variant_run(endpoint, tmp_path, direct.experiment, "tools", set())
    return Experiment.objects.get(name="paths")


def test_ranked_by_answer_the_variants_tie_and_ranked_by_trajectory_the_right_path_wins(paths):
    by_answer = leaderboard(paths)
    assert by_answer.rank_by == "answer"
    assert [v.name for v in by_answer.variants] == ["direct", "tools"]  # a tie goes to the name
    assert [v.accuracy for v in by_answer.variants] == [1.0, 1.0]
    assert by_answer.top_group == ["direct", "tools"]

    board = leaderboard(paths, rank_by="trajectory")
    assert board.rank_by == "trajectory"
    assert [v.name for v in board.variants] == ["tools", "direct"]
    tools, direct = board.variants
    interval = wilson_interval(2, 9)
    assert interval is not None
    low, high = interval
    # the plain example has no expected trajectory: not scored, never wrong
    assert direct.trajectory == {"accuracy": 2 / 9, "ci_low": low, "ci_high": high, "n": 9, "correct": 2}
    assert tools.trajectory is not None and (tools.trajectory["accuracy"], tools.trajectory["n"]) == (1.0, 9)
    [pair] = board.pairs
    # paired on the 9 examples both have a verdict for: tools passes 7 that direct fails, 0 the other way
    expected = mcnemar([[2, 7], [0, 0]], exact=True).pvalue
    assert (pair.a, pair.b, pair.n, pair.test) == ("tools", "direct", 9, TRAJECTORY_TEST)
    assert pair.difference == pytest.approx(7 / 9)
    assert pair.p_value == pytest.approx(expected) and pair.p_holm == pytest.approx(expected)
    assert expected < 0.05 and board.top_group == ["tools"]
    assert [v.top_group for v in board.variants] == [True, False]


def test_the_command_ranks_by_trajectory_and_refuses_an_unknown_rank_by(paths, tmp_path, capsys):
    out = tmp_path / "board.json"
    call_command("leaderboard", "paths", "--rank-by", "trajectory", "--json", str(out))
    text = capsys.readouterr().out
    expected = mcnemar([[2, 7], [0, 0]], exact=True).pvalue
    assert "ranked by trajectory" in text and f"p={expected:.4f} *" in text
    # direct's trajectory pass (a table cell wraps, so each half is looked for)
    interval = wilson_interval(2, 9)
    assert interval is not None
    low, high = interval
    assert "22.2%" in text and f"({low * 100:.1f}–{high * 100:.1f}%)" in text
    assert "row − column trajectory pass" in text
    body = json.loads(out.read_text(encoding="utf-8"))
    assert body["rank_by"] == "trajectory" and body["top_group"] == ["tools"]
    assert [v["name"] for v in body["variants"]] == ["tools", "direct"]
    assert body["variants"][1]["trajectory"]["correct"] == 2
    call_command("leaderboard", "paths")
    assert "ranked by answer" in capsys.readouterr().out
    with pytest.raises(CommandError) as caught:
        call_command("leaderboard", "paths", "--rank-by", "path")
    assert caught.value.returncode == 2
    assert "--rank-by: unknown value 'path'" in str(caught.value) and "'trajectory'" in str(caught.value)


def test_the_experiment_files_rank_by_is_the_default(paths, tmp_path):
    paths.spec = {"shared": {"rank_by": "trajectory"}}
    paths.save(update_fields=["spec"])
    assert [v.name for v in leaderboard(paths).variants] == ["tools", "direct"]
    assert leaderboard(paths, rank_by="answer").rank_by == "answer"
    base = 'name = "e"\ndataset = "d"\n[[variant]]\nname = "a"\nmodel = "m"\n'
    good = tmp_path / "good.toml"
    good.write_text('rank_by = "trajectory"\n' + base, encoding="utf-8")
    assert experiment_spec(good).shared["rank_by"] == "trajectory"
    bad = tmp_path / "bad.toml"
    bad.write_text('rank_by = "paths"\n' + base, encoding="utf-8")
    with pytest.raises(BadInput, match=r"bad\.toml: rank_by: unknown value 'paths'"):
        experiment_spec(bad)


def test_the_api_takes_rank_by(paths, owner):
    body = ApiClient(owner).get("/api/experiments/paths?rank_by=trajectory").json()
    assert body == json.loads(json.dumps(leaderboard_json(leaderboard(paths, rank_by="trajectory"))))
    assert body["rank_by"] == "trajectory" and body["top_group"] == ["tools"]
    assert ApiClient(owner).get("/api/experiments/paths").json()["rank_by"] == "answer"
    assert_error(ApiClient(owner).get("/api/experiments/paths?rank_by=path"), 422, "invalid")


def test_the_admin_page_ranks_by_trajectory(paths, staff):
    client = Client()
    client.force_login(staff)
    url = reverse("admin:evaluation_experiment_change", args=[paths.pk])
    response = client.get(url + "?rank_by=trajectory")
    assert response.status_code == 200
    assert [r["v"].name for r in response.context["rows"]] == ["tools", "direct"]
    interval = wilson_interval(2, 9)
    assert interval is not None
    low, high = interval
    assert [r["trajectory"] for r in response.context["rows"]][1] == (
        f"22.2% ({low * 100:.1f}–{high * 100:.1f}%) n=9"
    )
    html = response.content.decode()
    assert 'id="rank-by">trajectory<' in html and "trajectory pass (95% CI, n)" in html
    assert 'href="?rank_by=answer"' in html
    default = client.get(url)
    assert [r["v"].name for r in default.context["rows"]] == ["direct", "tools"]
    bad = client.get(url + "?rank_by=path")
    assert bad.status_code == 400 and "rank_by: unknown value 'path'" in bad.context["error"]
    assert 'id="leaderboard-error"' in bad.content.decode()
