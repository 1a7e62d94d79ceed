"""The LLM-call cache on a schedule of a dataset (issue 42): ``cache``,
``cache_expiry`` and ``cache_sampled`` are ``run_eval --cache
--cache-expiry --cache-sampled``; a nightly run of an unchanged variant
then asks the endpoint nothing it already asked, and a bad expiry is a form
error on its field with nothing saved."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from evaluation.models import EvalSchedule
from evaluation.schedules.firing import scheduled_run
from evaluation.schedules.options import schedule_check
from evaluation.schedules.sync import schedule_save
from tests.evaluation.schedules.test_schedule_subsets import _experiment, _schedule, lab  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cached_schedule_asks_nothing_twice_and_its_runs_record_the_policy(lab):
    schedule = schedule_save(schedule=_schedule(split="dev", cache=True, cache_expiry="7d"))
    request = schedule_check(schedule)
    assert request is not None and request.cache is not None
    assert request.cache.expiry is not None and request.cache.expiry.days == 7 and not request.cache.sampled

    first = scheduled_run(schedule_id=schedule.pk)
    assert first is not None and first.error is None and first.run is not None
    asked = lab.request_count
    assert asked == 8  # the 8 dev examples, one call each
    second = scheduled_run(schedule_id=schedule.pk)
    assert second is not None and second.error is None and second.run is not None
    assert lab.request_count == asked  # every call served from the cache
    policy = {"expiry_s": 7 * 86400, "sampled": False}
    assert second.run.config["cache"] == first.run.config["cache"] == policy
    assert second.run.metrics["accuracy"] == first.run.metrics["accuracy"] == 1.0


def test_without_cache_the_second_firing_asks_again(lab):
    schedule = schedule_save(schedule=_schedule(split="dev"))
    scheduled_run(schedule_id=schedule.pk)
    scheduled_run(schedule_id=schedule.pk)
    assert lab.request_count == 16


@pytest.mark.parametrize(
    ("options", "field", "expected"),
    [
        ({"cache": True, "cache_expiry": "soon"}, "cache_expiry", "cache expiry"),
        ({"cache_expiry": "7d"}, "cache_expiry", "cache expiry needs cache"),
        ({"cache_sampled": True}, "cache_sampled", "cache sampled needs cache"),
    ],
)
def test_a_bad_cache_option_is_refused_on_its_field(lab, options, field, expected):
    with pytest.raises(ValidationError) as caught:
        schedule_save(schedule=_schedule(**options))
    messages = caught.value.message_dict
    assert field in messages and expected in messages[field][0], messages
    assert not EvalSchedule.objects.exists()


def test_a_schedule_of_an_experiment_file_takes_its_cache_from_the_file(lab, tmp_path):
    schedule = _schedule(cache=True, cache_expiry="1d")
    schedule.dataset, schedule.experiment_file = "", str(_experiment(tmp_path, "cache = true"))
    with pytest.raises(ValidationError) as caught:
        schedule_check(schedule)
    errors = caught.value.message_dict
    assert errors["cache"] == ["an experiment file names its own cache (its shared options): leave this off"]
    assert "its own cache_expiry" in errors["cache_expiry"][0]
