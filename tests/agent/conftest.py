"""Fixtures for the agent core. Nothing here needs Django: run these tests with
``python -m pytest tests/agent -p no:django`` (they also pass with the Django
plugin loaded, they just never touch the database)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from agentlab.agent.tools import Tool, ToolContext, ToolRegistry, default_registry
from agentlab.testing.stub_llm import StubLLMServer, StubReply
from tests.shared_data import dataset_path


def dataset_rows(name: str) -> list[dict[str, Any]]:
    path = dataset_path(name)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class CountArgs(BaseModel):
    label: str = ""


class Counter:
    """A tool body that counts how often it really ran."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def __call__(self, args: CountArgs, context: ToolContext) -> str:
        self.runs.append(args.label)
        return f"counted {args.label} ({len(self.runs)})"


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def registry(counter: Counter) -> ToolRegistry:
    """The built-in tools plus ``count`` (records each real execution)."""
    reg = default_registry()
    reg.register(Tool(name="count", description="Count one.", parameters=CountArgs, fn=counter))
    return reg


@pytest.fixture
def stub_server() -> Iterator[Any]:
    """``start(replies_or_handler) -> StubLLMServer``; every server started is
    stopped after the test."""
    servers: list[StubLLMServer] = []

    def start(replies: list[StubReply] | Any) -> StubLLMServer:
        server = StubLLMServer.script(replies) if isinstance(replies, list) else StubLLMServer(replies)
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()
