"""A schedule that runs an experiment file: each firing makes one new run per
variant, and each variant's run is compared with that variant's previous run
of the schedule — never with another variant's."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django_celery_beat.models import IntervalSchedule

from evaluation.models import EvalSchedule, Run
from evaluation.schedules.firing import scheduled_run
from evaluation.schedules.sync import schedule_save
from tests.evaluation.schedules.schedule_support import ALL_MATH, stub_lab

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def lab(tmp_path, settings):
    with stub_lab(tmp_path, settings) as oracle:
        yield oracle


def _schedule(tmp_path, text: str, **options) -> EvalSchedule:
    path = tmp_path / "nightly.toml"
    path.write_text(text, encoding="utf-8")
    interval, _ = IntervalSchedule.objects.get_or_create(every=3600, period=IntervalSchedule.SECONDS)
    return schedule_save(
        schedule=EvalSchedule(name="nightly models", experiment_file=str(path), interval=interval, **options)
    )


FILE = """name = "Nightly"
dataset = "pairs"
review = false
[[variant]]
name = "a"
model = "model-a"
[[variant]]
name = "b"
model = "model-b"
max_steps = 3
"""


def test_each_variant_is_compared_with_its_own_previous_run(lab, tmp_path):
    schedule = _schedule(tmp_path, FILE)
    first = scheduled_run(schedule_id=schedule.pk)
    assert first.error is None
    assert [o.run.variant for o in first.variants] == ["a", "b"]
    assert all(o.run.status == "success" and o.baseline is None for o in first.variants)
    lab.wrong = set(ALL_MATH)
    second = scheduled_run(schedule_id=schedule.pk)
    by_variant = {o.run.variant: o for o in second.variants}
    for name, before in ((o.run.variant, o.run) for o in first.variants):
        run = Run.objects.get(pk=by_variant[name].run.pk)
        assert run.run_id != before.run_id and run.schedule_id == schedule.pk
        assert (run.regression, run.baseline_id) == (True, before.pk)
        assert run.regressions[0].startswith("overall: accuracy 1.000 → 0.250")
    # two firings, two experiments, two runs each
    assert Run.objects.filter(schedule=schedule).count() == 4
    assert len({run.experiment_id for run in Run.objects.filter(schedule=schedule)}) == 2


def test_a_schedule_with_a_bad_file_or_a_dataset_beside_it_is_refused(lab, tmp_path):
    with pytest.raises(ValidationError) as excinfo:
        _schedule(tmp_path, FILE.replace('model = "model-a"', 'modle = "model-a"'))
    assert "unknown key 'modle' (did you mean 'model'?)" in str(excinfo.value.message_dict["experiment_file"])
    with pytest.raises(ValidationError) as excinfo:
        _schedule(tmp_path, FILE, dataset="pairs")
    assert "not both" in str(excinfo.value.message_dict["dataset"])
    assert EvalSchedule.objects.count() == 0
