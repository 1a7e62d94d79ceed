"""Helpers of the scheduled-evaluation tests: the 16-example dataset and the
oracle of ``test_compare_runs`` (every answer right except those it is told
to get wrong), registered and served by a stub OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django_celery_beat.models import IntervalSchedule

from agentlab.testing.stub_llm import StubLLMServer
from evaluation.datasets.services import dataset_resolve
from evaluation.models import EvalSchedule
from evaluation.schedules.sync import schedule_save
from tests.evaluation.compare.test_compare_runs import ROWS, Oracle

#: Every math example wrong: accuracy 1.000 → 0.250, a significant regression.
ALL_MATH = frozenset(f"q{i}" for i in range(12))


@contextmanager
def stub_lab(tmp_path: Path, settings) -> Iterator[Oracle]:
    """Register dataset ``pairs`` (``ROWS``) and point the provider at a stub
    server answering as the yielded ``Oracle`` (set its ``wrong`` between runs)."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    dataset_resolve(name_or_path=str(path))
    oracle = Oracle()
    with StubLLMServer(oracle) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"
        yield oracle


def nightly(*, name: str = "nightly", every_s: int = 3600, **options) -> EvalSchedule:
    """A saved schedule (``schedule_save``: its PeriodicTask written) on
    ``pairs``, review off, every ``every_s`` seconds."""
    interval, _ = IntervalSchedule.objects.get_or_create(every=every_s, period=IntervalSchedule.SECONDS)
    schedule = EvalSchedule(name=name, dataset="pairs", review=False, interval=interval, **options)
    return schedule_save(schedule=schedule)
