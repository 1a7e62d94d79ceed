"""Fixtures shared by the evaluation tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentlab.testing.stub_llm import StubLLMServer


@pytest.fixture
def endpoint(settings) -> Callable[[StubLLMServer], None]:
    """``endpoint(server)`` points the OpenAI-compatible provider at a stub
    server (base URL, a test key, model ``stub-model``) for one test."""

    def use(server: StubLLMServer) -> None:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "test-key"
        settings.AGENTLAB_MODEL = "stub-model"

    return use
