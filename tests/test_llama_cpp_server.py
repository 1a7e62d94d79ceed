"""Through llama.cpp's own OpenAI-compatible server, not a stub (issue 46).

The server is ``python -m llama_cpp.server`` of llama-cpp-python — the
``local-server`` extra, the same wheel as the embedded model — started once
for the module on the embedded SmolLM2 GGUF with ``--chat_format
chatml-function-calling``, the set-up docs/configuration.md#endpoints
describes. Through it: streamed usage counted with the model's tokenizer, the
reviewer's verdict under its schema, a chat turn with a tool call and its
result, and a ``run_eval`` of 3 GSM8K examples with tool calls.

Marked ``local_model`` (``make test LOCAL=0`` skips it). The model is a
135M one: the tests assert what the protocol guarantees (a tool call is
made and answered, a verdict is readable, the tokens are counted), never
that its answers are right.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from django.core.management import call_command

from agentlab.agent.review import REVIEW_SCHEMA, review_answer
from agentlab.testing.net import free_port
from tests.shared_data import dataset_path

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        importlib.util.find_spec("fastapi") is None, reason="the local-server extra is missing"
    ),
]

#: Seconds the server may take to load the model and answer /v1/models.
START_S = 120


def _wait_ready(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"llama_cpp.server did not answer within {START_S} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(base_url, model)`` of a llama.cpp server on the embedded GGUF;
    the model's name there is the file's path (the server's default)."""
    from agentlab.agent.providers.local import default_gguf_path

    gguf = str(default_gguf_path())
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    argv = [
        sys.executable, "-m", "llama_cpp.server", "--model", gguf,
        "--chat_format", "chatml-function-calling", "--n_ctx", "4096",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process, log)
        yield base_url, gguf
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def endpoint(settings, llama_server: tuple[str, str]) -> tuple[str, str]:
    base_url, model = llama_server
    settings.AGENTLAB_LLM_BASE_URL = base_url
    settings.AGENTLAB_LLM_API_KEY = None
    settings.AGENTLAB_MODEL = model
    settings.AGENTLAB_LLM_STRUCTURED_OUTPUT = "json_schema"  # the default: the fallback is part of the test
    settings.AGENTLAB_LLM_STREAM_TOOLS = True
    settings.AGENTLAB_LLM_TOKENIZER = None
    # a CPU-only server shared with other work can take minutes for a reply
    settings.AGENTLAB_LLM_TIMEOUT_S = 600.0
    settings.AGENTLAB_TURN_TIMEOUT_S = 1800.0
    return llama_server


def _provider():
    from turns.llm import get_provider

    return get_provider()


def test_streamed_usage_is_counted_with_the_models_tokenizer(endpoint) -> None:
    """The server sends no usage with a stream; the provider counts it with
    the GGUF's tokenizer. Against the server's own count for the same
    request unstreamed: the reply's tokens exactly, the prompt's too (the
    server's ChatML frame is the model's template when a system message is
    given)."""
    messages = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name three primary colours."},
    ]

    async def both():
        provider = _provider()
        try:
            deltas: list = []
            streamed = await provider.complete(
                messages, max_tokens=24, temperature=0.0, on_delta=deltas.append
            )
            plain = await provider.complete(messages, max_tokens=24, temperature=0.0)
        finally:
            await provider.aclose()
        return provider, deltas, streamed, plain

    provider, deltas, streamed, plain = asyncio.run(both())
    assert provider.token_counter is not None  # the model's name is the GGUF's path
    assert deltas and "".join(d.text for d in deltas if d.text) == streamed.text
    assert streamed.text == plain.text  # greedy: the same reply
    assert plain.usage.known  # the server's own count, unstreamed
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (
        plain.usage.input_tokens,
        plain.usage.output_tokens,
    )


def test_the_reviewers_verdict_is_decoded_under_its_schema(endpoint) -> None:
    """llama-cpp-python's server refuses ``json_schema`` (a 500 validation
    error) and reads ``json_object`` with a schema: the provider falls back
    once and the verdict is a value of REVIEW_SCHEMA."""

    async def review():
        provider = _provider()
        try:
            return provider, *await review_answer(
                provider,
                question="What is 6 * 7?",
                answer="42",
                evidence="calculator: 6*7 = 42",
                reasoning="multiplied 6 by 7",
            )
        finally:
            await provider.aclose()

    provider, verdict, completion = asyncio.run(review())
    assert provider.structured_output == "json_object"
    assert completion.decoding == "schema" and completion.finish_reason == "stop", completion.text
    # the server's grammar lets a string hold raw newlines (strict JSON does not)
    jsonschema.validate(json.loads(completion.text, strict=False), REVIEW_SCHEMA)
    assert verdict.verdict in ("accept", "retry", "cannot_judge") and verdict.error is None


@pytest.mark.timeout(1200)  # a CPU-only server: a few tokens a second on a loaded machine
@pytest.mark.django_db(transaction=True)
def test_a_chat_turn_with_a_tool_call_its_result_a_review_and_counted_usage(
    endpoint, settings, owner, db_threads
) -> None:
    from turns.driver import CHAT, drive_turn
    from turns.models import Turn
    from turns.selectors import events_after
    from turns.services import turn_create

    settings.AGENTLAB_REVIEW = True
    settings.REVIEW_WAIT_S = 300.0
    settings.AGENTLAB_MAX_OUTPUT_TOKENS = 256
    settings.AGENTLAB_MAX_STEPS = 4
    question = "Use the calculator: what is 1234 * 5678?"

    async def run():
        turn = await db_threads.run(turn_create, owner=owner, question=question)
        # greedy decoding: the same turn every time on this build (the server's default samples at 0.8)
        await db_threads.run(
            lambda: Turn.objects.filter(pk=turn.pk).update(agent_options={"temperature": 0.0})
        )
        provider = _provider()
        try:
            await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db_threads)
        finally:
            await provider.aclose()
        return turn.pk

    turn_id = asyncio.run(run())
    turn = Turn.objects.get(pk=turn_id)
    events = list(events_after(turn_id=turn_id))
    calls = [e.data["call"] for e in events if e.type == "tool.call"]
    results = [e.data["result"] for e in events if e.type == "tool.result"]
    assert calls, [e.type for e in events]
    assert calls[0]["id"] in {r["call_id"] for r in results}  # the call was run and its result recorded
    assert turn.stop_reason != "provider_error", turn.meta
    reviews = [e.data for e in events if e.type == "review"]
    assert reviews and reviews[0]["verdict"] in ("accept", "retry", "cannot_judge"), reviews
    usage = [e.data for e in events if e.type == "llm.usage"]
    assert usage and all(u["input_tokens"] and u["output_tokens"] for u in usage), usage
    assert turn.usage["unknown_calls"] == 0 and turn.usage["input_tokens"] > 0


@pytest.mark.timeout(1200)
@pytest.mark.django_db(transaction=True)
def test_run_eval_on_three_gsm8k_examples_makes_tool_calls(endpoint) -> None:
    from evaluation.models import Prediction

    call_command(
        "run_eval", str(dataset_path("gsm8k-test-200.jsonl")), "--limit", "3", "--no-review",
        "--concurrency", "1", "--max-steps", "3", "--max-output-tokens", "128", "--run-id", "llama-3",
    )  # fmt: skip
    predictions = list(Prediction.objects.filter(run__run_id="llama-3").select_related("turn"))
    assert len(predictions) == 3
    for prediction in predictions:
        assert prediction.stop_reason != "provider_error", prediction.error
        kinds = [e.type for e in prediction.turn.events.order_by("seq")]
        assert kinds.count("tool.call") >= 1 and kinds.count("tool.result") == kinds.count("tool.call"), kinds
