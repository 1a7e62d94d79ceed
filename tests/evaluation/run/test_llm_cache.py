"""The LLM-call cache in ``run_eval`` (``--cache``) and ``cache_clear``: real
runs against the stub OpenAI-compatible server on loopback, the cache in the
test database (docs/evaluating.md#caching-llm-calls)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agentlab.agent.types import Completion, Usage
from agentlab.testing.stub_llm import StubLLMServer, StubReply, final_answer_reply
from evaluation.models import Prediction, Run
from turns.llm_cache import DatabaseCallCache, cache_lookup, cache_store
from turns.models import EventType, LLMCacheEntry, TurnEvent

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = [
    {"question_id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i), "task_type": "math"}
    for i in range(1, 5)
]


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    return str(path)


def _answer(body: dict[str, Any]) -> StubReply:
    """The sum the question asks for, so each example has its own answer."""
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    n = int(question.split("What is ")[1].split(" +")[0])
    return final_answer_reply(str(2 * n), usage=(1000, 200))


@pytest.fixture
def stub(endpoint):
    """One stub server for the test (its base URL is part of the cache key)."""
    with StubLLMServer(_answer) as server:
        endpoint(server)
        yield server


def _run(
    server: StubLLMServer, dataset: str, run_id: str, *options: str, model: str = "stub-model"
) -> tuple[Run, int]:
    """Run ``run_eval`` on ``server``: the run and the requests it made."""
    before = server.request_count
    call_command("run_eval", "--no-review", dataset, "--run-id", run_id, "--model", model, *options)
    return Run.objects.get(run_id=run_id), server.request_count - before


def _predictions(run: Run) -> dict[str, str]:
    rows = Prediction.objects.filter(run=run).values_list("example__external_id", "prediction")
    return dict(rows)


def test_a_second_identical_run_makes_no_request_and_gives_the_same_predictions(stub, dataset) -> None:
    first, first_requests = _run(stub, dataset, "cold", "--cache", "--cache-expiry", "7d")
    second, second_requests = _run(stub, dataset, "warm", "--cache", "--cache-expiry", "7d")
    assert first_requests == 4 and second_requests == 0
    assert _predictions(second) == _predictions(first) == {"q1": "2", "q2": "4", "q3": "6", "q4": "8"}
    assert LLMCacheEntry.objects.count() == 4
    entry = LLMCacheEntry.objects.first()
    assert entry is not None and entry.expires_at is not None
    assert timedelta(days=7) - (entry.expires_at - entry.created_at) < timedelta(seconds=5)
    assert entry.request["model"] == "stub-model" and entry.request["messages"][-1]["role"] == "user"
    # the run report: calls made vs served from the cache, the latter not charged
    cold, warm = first.metrics["usage"], second.metrics["usage"]
    assert (cold["calls"], cold.get("cache_hits", 0)) == (4, 0)
    assert (warm["calls"], warm["cache_hits"], warm["input_tokens"]) == (0, 4, 0)
    assert (warm["cache_hit_input_tokens"], warm["cache_hit_output_tokens"]) == (4000, 800)
    assert first.config["cache"] == {"expiry_s": 7 * 86400, "sampled": False}
    # each served completion's event says so
    usage_events = TurnEvent.objects.filter(
        type=EventType.LLM_USAGE, turn__predictions__run=second
    ).values_list("data", flat=True)
    assert len(usage_events) == 4 and all(data["cached"] is True for data in usage_events)
    assert not TurnEvent.objects.filter(
        type=EventType.LLM_USAGE, turn__predictions__run=first, data__has_key="cached"
    ).exists()


def test_without_cache_a_run_neither_reads_nor_writes_it(stub, dataset) -> None:
    _run(stub, dataset, "cold", "--cache")
    run, requests = _run(stub, dataset, "plain")
    assert requests == 4 and "cache" not in run.config
    assert LLMCacheEntry.objects.count() == 4


def test_another_model_misses(stub, dataset) -> None:
    _run(stub, dataset, "a", "--cache")
    _, requests = _run(stub, dataset, "b", "--cache", model="other-model")
    assert requests == 4 and LLMCacheEntry.objects.count() == 8


def test_an_expired_entry_is_not_served(stub, dataset) -> None:
    _run(stub, dataset, "cold", "--cache", "--cache-expiry", "1h")
    LLMCacheEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    _, requests = _run(stub, dataset, "after", "--cache", "--cache-expiry", "1h")
    assert requests == 4
    # the expired entries were replaced by fresh ones
    assert LLMCacheEntry.objects.count() == 4
    assert LLMCacheEntry.objects.filter(expires_at__gt=timezone.now()).count() == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--cache", "--cache-expiry", "7days"], "--cache-expiry must be a positive whole number"),
        (["--cache-expiry", "7d"], "--cache-expiry needs --cache"),
        (["--cache-sampled"], "--cache-sampled needs --cache"),
    ],
)
def test_bad_cache_options_exit_2_with_nothing_written(endpoint, dataset, options, message) -> None:
    with StubLLMServer(_answer) as server:
        endpoint(server)
        with pytest.raises(CommandError, match=message) as caught:
            call_command("run_eval", "--no-review", dataset, "--run-id", "bad", *options)
        assert server.request_count == 0
    assert caught.value.returncode == 2
    assert not Run.objects.exists() and not LLMCacheEntry.objects.exists()


def _entry(key: str, model: str, age: timedelta) -> None:
    completion = Completion(text="x", usage=Usage(1, 1), model=model)
    cache_store(key, request={"model": model}, completion=completion.to_dict(), model=model, expiry=None)
    LLMCacheEntry.objects.filter(key=key).update(created_at=timezone.now() - age)


def test_cache_clear_by_age_and_model(capsys) -> None:
    _entry("a" * 64, "m1", timedelta(days=10))
    _entry("b" * 64, "m2", timedelta(days=10))
    _entry("c" * 64, "m1", timedelta(hours=1))
    call_command("cache_clear", "--older-than", "7d", "--model", "m1")
    assert sorted(LLMCacheEntry.objects.values_list("key", flat=True)) == ["b" * 64, "c" * 64]
    assert "deleted 1 cached LLM completion(s)" in capsys.readouterr().out
    call_command("cache_clear", "--older-than", "7d")
    assert list(LLMCacheEntry.objects.values_list("key", flat=True)) == ["c" * 64]
    call_command("cache_clear")
    assert not LLMCacheEntry.objects.exists()


def test_cache_clear_refuses_an_age_that_does_not_parse() -> None:
    _entry("a" * 64, "m1", timedelta(days=10))
    with pytest.raises(CommandError, match="--older-than must be a positive whole number") as caught:
        call_command("cache_clear", "--older-than", "ten days")
    assert caught.value.returncode == 2 and LLMCacheEntry.objects.count() == 1


def test_concurrent_writes_of_one_key_store_one_entry() -> None:
    async def go() -> None:
        store = DatabaseCallCache(max_workers=4)
        try:
            await asyncio.gather(
                *(
                    store.put(
                        "k" * 64,
                        request={"n": n},
                        completion=Completion(text=f"answer {n}").to_dict(),
                        model="m",
                        expiry=None,
                    )
                    for n in range(4)
                )
            )
        finally:
            store.close()

    asyncio.run(go())
    assert LLMCacheEntry.objects.count() == 1
    stored = cache_lookup("k" * 64)
    assert stored is not None and stored["text"].startswith("answer ")


def _experiment(tmp_path, dataset: str, head: str):
    path = tmp_path / "experiment.toml"
    path.write_text(
        f'name = "Cached"\ndataset = "{dataset}"\nreview = false\n{head}\n'
        '[[variant]]\nname = "same"\nmodel = "stub-model"\n',
        encoding="utf-8",
    )
    return str(path)


def test_an_experiment_with_cache_true_is_served_from_the_cache(stub, dataset, tmp_path) -> None:
    call_command("import_dataset", dataset, "--name", "sums")
    _run(stub, "sums", "cold", "--cache")
    before = stub.request_count
    call_command("run_experiment", _experiment(tmp_path, "sums", 'cache = true\ncache_expiry = "2w"'))
    assert stub.request_count == before  # every call served from the cold run's entries
    run = Run.objects.get(run_id="cached.same")
    assert run.config["cache"] == {"expiry_s": 14 * 86400, "sampled": False}
    assert (run.metrics["usage"]["calls"], run.metrics["usage"]["cache_hits"]) == (0, 4)


def test_an_experiment_cache_expiry_that_does_not_parse_is_exit_2(stub, dataset, tmp_path) -> None:
    call_command("import_dataset", dataset, "--name", "sums")
    with pytest.raises(CommandError, match="cache_expiry must be a positive whole number") as caught:
        call_command("run_experiment", _experiment(tmp_path, "sums", 'cache = true\ncache_expiry = "soon"'))
    assert caught.value.returncode == 2
    assert stub.request_count == 0 and not Run.objects.exists()


def test_chat_turns_use_the_cache_only_when_the_setting_says_so(settings, stub) -> None:
    from agentlab.agent.providers.caching import CachingProvider
    from turns.jobs.run import make_job_provider

    settings.AGENTLAB_CHAT_LLM_CACHE = ""
    assert not isinstance(make_job_provider(), CachingProvider)
    settings.AGENTLAB_CHAT_LLM_CACHE = "off"
    assert not isinstance(make_job_provider(), CachingProvider)
    settings.AGENTLAB_CHAT_LLM_CACHE = "on"
    provider = make_job_provider()
    assert isinstance(provider, CachingProvider) and provider.policy.expiry is None
    settings.AGENTLAB_CHAT_LLM_CACHE = "12h"
    provider = make_job_provider()
    assert isinstance(provider, CachingProvider) and provider.policy.expiry == timedelta(hours=12)
    assert provider.model == "stub-model" and provider.name == "openai"


def test_a_chat_cache_setting_that_does_not_parse_stops_manage_py_with_exit_2(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "AGENTLAB_CHAT_LLM_CACHE": "weekly", "AGENTLAB_SQLITE_PATH": str(tmp_path / "x.db")}
    env.pop("DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "AGENTLAB_CHAT_LLM_CACHE must be a positive whole number" in proc.stderr
