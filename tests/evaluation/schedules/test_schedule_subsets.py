"""``split`` and ``tags`` (docs/evaluating.md#splits-and-tags) in an
experiment file's shared options and on a schedule (issue 45): the variants'
or the firing's run drives only that subset and records it in its config, as
``run_eval --split --tag`` does; an unknown split or tag is exit 2 naming it
(``run_experiment``) or a form error on its field (the schedule), with
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django_celery_beat.models import IntervalSchedule

from agentlab.testing.stub_llm import StubLLMServer
from evaluation.datasets.services import dataset_resolve
from evaluation.models import EvalSchedule, Experiment, Run
from evaluation.schedules.firing import scheduled_run
from evaluation.schedules.options import schedule_check
from evaluation.schedules.sync import schedule_save
from tests.evaluation.compare.test_compare_runs import ROWS, Oracle
from turns.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)


def _subset(i: int) -> dict[str, object]:
    """Row i of ``ROWS``: split dev for 0..7, test for 8..15; tag hard on the even ones."""
    return {"split": "dev" if i < 8 else "test", **({"tags": ["hard"]} if i % 2 == 0 else {})}


#: dev ∩ hard: rows 0, 2, 4, 6
DEV_HARD = ["q0", "q2", "q4", "q6"]


@pytest.fixture
def lab(tmp_path, settings):
    """Dataset ``pairs`` with splits and tags, and a stub endpoint that answers every question right."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r | _subset(i)) + "\n" for i, r in enumerate(ROWS)), encoding="utf-8")
    dataset_resolve(name_or_path=str(path))
    oracle = Oracle()
    with StubLLMServer(oracle) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"
        yield server


def _experiment(tmp_path: Path, head: str) -> Path:
    path = tmp_path / "experiment.toml"
    path.write_text(
        f'name = "Subset A/B"\ndataset = "pairs"\nreview = false\n{head}\n'
        '[[variant]]\nname = "cold"\ntemperature = 0.0\n\n[[variant]]\nname = "warm"\ntemperature = 0.8\n',
        encoding="utf-8",
    )
    return path


def _asked(run: Run) -> list[str]:
    return sorted(run.predictions.values_list("example__external_id", flat=True))


def test_an_experiment_runs_every_variant_on_its_split_and_tags(lab, tmp_path):
    call_command("run_experiment", str(_experiment(tmp_path, 'split = "dev"\ntags = ["hard"]')))
    runs = list(Run.objects.order_by("run_id"))
    assert [r.run_id for r in runs] == ["subset-a-b.cold", "subset-a-b.warm"]
    for run in runs:
        assert (run.config["split"], run.config["tags"]) == ("dev", ["hard"])
        assert _asked(run) == DEV_HARD
    assert lab.request_count == 8  # 4 examples × 2 variants, nothing else
    assert Experiment.objects.get().spec["shared"] == {"review": False, "split": "dev", "tags": ["hard"]}


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (
            'split = "nope"',
            "split nope: dataset pairs@1 has no example in that split (its splits: dev, test)",
        ),
        ('tags = ["rare"]', "tag rare: no example of dataset pairs@1 carries it (its tags: hard)"),
        ("tags = [1]", "tags: expected a list of strings"),
        ('split = ""', "split is empty"),
        ('tags = [" "]', "tag must name a tag"),
    ],
)
def test_an_unknown_split_or_tag_in_an_experiment_is_exit_2_and_writes_nothing(lab, tmp_path, head, expected):
    path = _experiment(tmp_path, head)
    with pytest.raises(CommandError) as caught:
        call_command("run_experiment", str(path))
    assert caught.value.returncode == 2
    assert str(caught.value).startswith(str(path)) and expected in str(caught.value), str(caught.value)
    assert (Experiment.objects.count(), Run.objects.count(), Turn.objects.count(), lab.request_count) == (
        0,
        0,
        0,
        0,
    )


def _schedule(**options) -> EvalSchedule:
    interval, _ = IntervalSchedule.objects.get_or_create(every=3600, period=IntervalSchedule.SECONDS)
    return EvalSchedule(name="nightly-dev", dataset="pairs", review=False, interval=interval, **options)


def test_a_schedule_fires_its_split_and_tags_and_the_run_records_them(lab):
    schedule = schedule_save(schedule=_schedule(split="dev", tags="hard, "))
    assert schedule_check(schedule).tags == ("hard",)
    outcome = scheduled_run(schedule_id=schedule.pk)
    assert outcome is not None and outcome.error is None
    run = outcome.run
    assert run is not None
    assert (run.schedule_id, run.config["split"], run.config["tags"]) == (schedule.pk, "dev", ["hard"])
    assert _asked(run) == DEV_HARD


@pytest.mark.parametrize(
    ("options", "field", "expected"),
    [
        (
            {"split": "nope"},
            "split",
            "split nope: dataset pairs@1 has no example in that split (its splits: dev, test)",
        ),
        (
            {"tags": "hard,rare"},
            "tags",
            "tag rare: no example of dataset pairs@1 carries it (its tags: hard)",
        ),
        ({"split": " "}, None, None),  # blank: every split
    ],
)
def test_a_schedule_with_an_unknown_split_or_tag_is_refused_on_that_field(lab, options, field, expected):
    schedule = _schedule(**options)
    if field is None:
        assert schedule_check(schedule).split is None
        return
    with pytest.raises(ValidationError) as caught:
        schedule_save(schedule=schedule)
    assert caught.value.message_dict[field] == [expected]
    assert not EvalSchedule.objects.exists()


def test_a_schedule_of_an_experiment_file_takes_its_subset_from_the_file(lab, tmp_path):
    path = _experiment(tmp_path, 'split = "dev"')
    schedule = _schedule(split="dev", tags="hard")
    schedule.dataset, schedule.experiment_file = "", str(path)
    with pytest.raises(ValidationError) as caught:
        schedule_check(schedule)
    errors = caught.value.message_dict
    assert errors["split"] == [
        "an experiment file names its own split (its shared options): leave this blank"
    ]
    assert "its own tags" in errors["tags"][0]


def test_the_admin_form_shows_an_unknown_split_on_its_field(lab, client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123"))
    interval = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    form = {
        "name": "nightly", "enabled": "on", "interval": str(interval.pk), "crontab": "", "dataset": "pairs",
        "model": "", "limit": "", "concurrency": "4", "max_steps": "", "epochs": "", "queue": "",
        "judge_model": "", "plugins": "", "baseline_policy": "previous", "alpha": "0.05",
    }  # fmt: skip
    url = "/admin/evaluation/evalschedule/add/"
    response = client.post(url, {**form, "split": "nope", "tags": ""})
    assert response.status_code == 200
    assert "split nope: dataset pairs@1" in response.context["adminform"].form.errors["split"][0]
    assert not EvalSchedule.objects.exists()
    assert client.post(url, {**form, "split": "test", "tags": "hard"}).status_code == 302
    saved = EvalSchedule.objects.get()
    assert (saved.split, saved.tag_names) == ("test", ["hard"])
