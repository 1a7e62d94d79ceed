"""The stub OpenAI-compatible server itself: raw HTTP, scripts, benchmark mode."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
from agentlab.testing.stub_llm import (
    StubLLMServer,
    final_answer_handler,
    insufficient_quota,
    text_reply,
)

REPO = Path(__file__).resolve().parents[2]


def _post(port: int, body: dict, conn: http.client.HTTPConnection | None = None) -> tuple[int, dict]:
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        if own:
            conn.close()


def test_script_replies_in_order_and_records_requests() -> None:
    with StubLLMServer.script([insufficient_quota(), text_reply("hi", usage=(3, 1))]) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)  # one keep-alive connection
        status, body = _post(
            server.port, {"model": "m", "messages": [{"role": "user", "content": "a"}]}, conn
        )
        assert status == 429
        assert body == {
            "error": {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            }
        }
        status, body = _post(server.port, {"model": "m", "messages": []}, conn)
        assert status == 200
        assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        status, body = _post(server.port, {"model": "m", "messages": []}, conn)
        assert status == 500
        assert body["error"]["message"] == "stub script exhausted: request 3, 2 replies"
        conn.close()
        assert server.request_count == 3
        assert server.requests[0] == {"model": "m", "messages": [{"role": "user", "content": "a"}]}


def test_unknown_route_is_404() -> None:
    with StubLLMServer(lambda body: text_reply("x")) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("POST", "/v1/embeddings", body="{}")
        response = conn.getresponse()
        conn.close()
        assert response.status == 404
        assert server.request_count == 0


async def test_final_answer_handler_answers_with_the_last_number() -> None:
    with StubLLMServer(final_answer_handler()) as server:
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key=None, model="bench")
        try:
            completion = await provider.complete(
                [
                    {"role": "system", "content": "s 7"},
                    {"role": "user", "content": "Janet sells 1,250 eggs at $2."},
                ]
            )
            assert completion.tool_calls[0].name == "final_answer"
            assert completion.tool_calls[0].arguments["answer"] == "2"
            completion = await provider.complete([{"role": "user", "content": "How many 1,250 eggs?"}])
            assert completion.tool_calls[0].arguments["answer"] == "1250"
            completion = await provider.complete([{"role": "user", "content": "No numbers here"}])
            assert completion.tool_calls[0].arguments["answer"] == "42"
        finally:
            await provider.aclose()


def test_delayed_replies_are_served_concurrently() -> None:
    with StubLLMServer(final_answer_handler(latency=0.2)) as server:
        statuses: list[int] = []

        def client() -> None:
            statuses.append(_post(server.port, {"messages": [{"role": "user", "content": "1"}]})[0])

        threads = [threading.Thread(target=client) for _ in range(32)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    assert statuses == [200] * 32
    assert elapsed < 1.5  # 32 × 0.2 s would take 6.4 s if served one by one


def test_command_line_benchmark_mode() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlab.testing.stub_llm", "--port", "0", "--latency-ms", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("stub LLM listening on http://127.0.0.1:")
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        status, body = _post(
            port, {"model": "x", "messages": [{"role": "user", "content": "What is 6 times 7?"}]}
        )
        assert status == 200
        call = body["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "final_answer"
        assert json.loads(call["function"]["arguments"])["answer"] == "7"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=5)
    assert process.returncode == 0
    assert stderr == "stub LLM stopping after 1 requests\n"
