"""Which tokenizer counts an endpoint's streamed tokens (``tokenizer_path``),
and what the counter answers when it cannot count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agentlab.agent.providers.token_count import TokenCounter, tokenizer_path


def test_the_setting_off_a_path_and_a_model_named_by_its_file(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    assert tokenizer_path(str(gguf), "off") is None
    assert tokenizer_path("gpt-4o-mini", "OFF") is None
    assert tokenizer_path("gpt-4o-mini", str(gguf)) == gguf
    with pytest.raises(
        ValueError, match=r"AGENTLAB_LLM_TOKENIZER must be a GGUF file or 'off', got '/nope.gguf'"
    ):
        tokenizer_path("gpt-4o-mini", "/nope.gguf")
    # unset: llama.cpp's server names a model by its path
    assert tokenizer_path(str(gguf), None) == gguf
    assert tokenizer_path(str(tmp_path / "missing.gguf"), None) is None
    assert tokenizer_path("gpt-4o-mini", None) is None


@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="the local extra is missing")
def test_the_embedded_models_name_finds_its_file_and_its_tokens_are_counted() -> None:
    from agentlab.agent.providers.local import LocalGGUFProvider, default_gguf_path

    embedded = default_gguf_path()
    name = LocalGGUFProvider(model_path=embedded).model
    assert tokenizer_path(name, None) == embedded
    counter = TokenCounter(embedded)
    usage = counter.usage({"messages": [{"role": "user", "content": "Hi"}]}, text="Hello there!", calls=[])
    assert usage is not None and usage["completion_tokens"] == counter.count("Hello there!") > 0
    assert usage["prompt_tokens"] > counter.count("Hi")  # the template's frame is counted too


def test_a_counter_that_cannot_load_its_tokenizer_says_unknown(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    counter = TokenCounter(broken)
    assert counter.usage({"messages": []}, text="x", calls=[]) is None
