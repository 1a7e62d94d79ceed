"""What ``run_eval`` needs to drive many turns at once (docs/benchmarks.md#many-in-flight):
the concurrency it accepts, the open files it raises its limit to, and no
query per example when a finished turn is scored."""

from __future__ import annotations

import resource

import pytest

from evaluation.datasets.services import dataset_resolve
from evaluation.run import evaluate
from evaluation.run.evaluate import open_files_allow
from evaluation.run.lifecycle import run_start
from evaluation.run.plan import run_plan
from evaluation.run.record import example_scorer
from evaluation.run.request import MAX_CONCURRENCY, eval_request


def test_concurrency_goes_up_to_1024_and_no_further():
    assert MAX_CONCURRENCY == 1024
    assert eval_request(dataset="demo", concurrency=1024).concurrency == 1024
    with pytest.raises(ValueError) as excinfo:
        eval_request(dataset="demo", concurrency=1025)
    assert str(excinfo.value) == "--concurrency must be between 1 and 1024, got 1025"


@pytest.fixture
def open_files():
    """The soft and hard limits on open files, put back after the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard limit on open files is {hard}")
    yield soft, hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_soft_limit_below_what_the_drive_needs_is_raised_to_the_hard_limit(open_files):
    _, hard = open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    open_files_allow(1024 + 32 + evaluate.OPEN_FILES_SPARE)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)


def test_a_soft_limit_that_suffices_is_left_alone(open_files):
    _, hard = open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    open_files_allow(300)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1024, hard)


def test_a_hard_limit_below_what_the_drive_needs_is_said(open_files, caplog):
    _, hard = open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    open_files_allow(hard + 1 if hard != resource.RLIM_INFINITY else 10**9)
    assert "may need" in caplog.text and "ulimit -Hn" in caplog.text


@pytest.mark.django_db
def test_planned_examples_are_scored_without_a_query_for_their_dataset(django_assert_num_queries):
    dataset = dataset_resolve(name_or_path="demo")
    run, _ = run_start(run_id="scored-in-memory", dataset=dataset, config={"model": "m"})
    planned, _ = run_plan(run=run, limit=3, max_steps=2, model="m")
    with django_assert_num_queries(0):
        scorers = [example_scorer(item.example) for item in planned]
    assert len(scorers) == 3
