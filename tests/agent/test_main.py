"""``python -m agentlab.agent``: one question, transcript printed and written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply

REPO = Path(__file__).resolve().parents[2]


def test_cli_prints_every_step_and_writes_the_transcript(tmp_path: Path) -> None:
    replies = [
        tool_call_reply("calculator", '{"expression": "6 * 7"}', id="c1", usage=(50, 9)),
        final_answer_reply("42", "6 * 7 = 42", "multiplied", id="f1", usage=(70, 12)),
    ]
    out = tmp_path / "transcript.txt"
    with StubLLMServer.script(replies) as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentlab.agent",
                "--base-url",
                server.base_url,
                "--model",
                "stub-model",
                "--out",
                str(out),
                "What is 6 times 7?",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "provider: openai / model: stub-model / native tools: True"
    assert lines[1] == "question: What is 6 times 7?"
    assert lines[2].startswith("--- step 1: completion (")
    assert lines[2].endswith("finish tool_calls, input 50 / output 9 tokens)")
    assert lines[3:6] == [
        "text: None",
        'tool call c1: calculator {"expression": "6 * 7"}',
        "result of c1 calculator: 42",
    ]
    assert "stop reason: final" in lines
    assert "answer: '42'" in lines
    assert "evidence: '6 * 7 = 42'" in lines
    assert any(
        line.startswith('usage: {"input_tokens": 120, "output_tokens": 21, "calls": 2,') for line in lines
    )
    assert done.stdout.splitlines() == lines
