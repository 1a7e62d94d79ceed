"""Run the agent once and print its transcript (no Django, no database).

    python -m agentlab.agent "What is 12 * 7?"
    python -m agentlab.agent --jsonl gsm8k-test-200.jsonl --index 0 --out transcript.txt
    python -m agentlab.agent --base-url http://127.0.0.1:8000/v1 --model qwen "…"

The provider comes from the flags or, when they are absent, the same
environment variables as the server (``AGENTLAB_LLM_BASE_URL``,
``AGENTLAB_LLM_API_KEY``, ``AGENTLAB_MODEL``, ``AGENTLAB_GGUF_PATH``); unset
means the embedded GGUF model. Prints every step (completion text, tool calls,
results, usage, seconds) and the output tokens per second of the LLM calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from agentlab.agent.loop import AgentLoop, LoopResult
from agentlab.agent.providers import make_provider
from agentlab.agent.reports import CompletionReport, Report, ToolResultReport
from agentlab.agent.tools import ToolContext, default_registry
from agentlab.agent.types import LLMProvider


def _load_example(path: str, index: int) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        rows: list[dict[str, Any]] = [json.loads(line) for line in handle if line.strip()]
    return rows[index]


class _Transcript:
    """What the command prints, one line at a time, kept for ``--out``; as
    the loop's ``on_report`` it prints each completion and tool result and
    adds up the seconds spent waiting for the LLM."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.llm_seconds = 0.0
        self.last = time.perf_counter()

    def out(self, text: str = "") -> None:
        self.lines.append(text)
        print(text, flush=True)

    async def __call__(self, report: Report) -> None:
        now = time.perf_counter()
        if not isinstance(report, CompletionReport | ToolResultReport):
            return  # a start: the tool's result says all there is to say here (no replay here)
        if isinstance(report, CompletionReport):
            self.llm_seconds += now - self.last
            self._completion(report, seconds=now - self.last)
        else:
            flag = " (error)" if report.result.is_error else ""
            self.out(f"result of {report.call.id} {report.result.name}{flag}: {report.result.output}")
        self.last = time.perf_counter()

    def _completion(self, report: CompletionReport, *, seconds: float) -> None:
        c = report.completion
        self.out(
            f"--- step {report.step}: completion ({seconds:.2f} s, model {c.model}, "
            f"finish {c.finish_reason}, input {c.usage.input_tokens} / "
            f"output {c.usage.output_tokens} tokens)"
        )
        self.out(f"text: {c.text!r}")
        for call in c.tool_calls:
            detail = f" ERROR: {call.error}" if call.error else ""
            self.out(f"tool call {call.id}: {call.name or '(unparsed)'} {json.dumps(call.arguments)}{detail}")
        if not c.tool_calls:
            self.out("tool calls: none")

    def result(self, result: LoopResult, *, wall: float) -> None:
        """The loop's result, its usage and the token rates over the LLM calls."""
        usage = result.usage
        self.out("=== result")
        self.out(f"stop reason: {result.stop_reason}" + (f" ({result.error})" if result.error else ""))
        self.out(f"answer: {result.answer!r}")
        self.out(f"evidence: {result.evidence!r}")
        self.out(f"reasoning: {result.reasoning!r}")
        if result.question is not None:
            self.out(f"clarifying question: {result.question!r}")
        self.out(f"steps used: {result.steps_used}")
        self.out(f"usage: {json.dumps(usage.to_dict())}")
        llm = self.llm_seconds
        rate = usage.output_tokens / llm if llm > 0 else 0.0
        total_rate = (usage.input_tokens + usage.output_tokens) / llm if llm > 0 else 0.0
        self.out(
            f"time: {wall:.2f} s in all, {llm:.2f} s in LLM calls; "
            f"{rate:.1f} output tokens/s, {total_rate:.1f} "
            "prompt+output tokens/s over the LLM calls"
        )
        if hasattr(os, "getloadavg"):
            self.out(
                f"machine: {os.cpu_count()} CPUs, 1-minute load average {os.getloadavg()[0]:.2f} at the end"
            )


def _provider(args: argparse.Namespace) -> LLMProvider:
    """The provider the options (else the ``AGENTLAB_*`` variables) name."""
    return make_provider(
        base_url=args.base_url or os.environ.get("AGENTLAB_LLM_BASE_URL") or None,
        api_key=args.api_key or os.environ.get("AGENTLAB_LLM_API_KEY") or None,
        model=args.model or os.environ.get("AGENTLAB_MODEL") or None,
        gguf_path=args.gguf or os.environ.get("AGENTLAB_GGUF_PATH") or None,
    )


async def _main(args: argparse.Namespace) -> int:
    example: dict[str, Any] = {}
    if args.jsonl:
        example = _load_example(args.jsonl, args.index)
        question = str(example["question"])
    elif args.question:
        question = args.question
    else:
        print("give a question or --jsonl FILE", file=sys.stderr)
        return 2
    provider = _provider(args)
    documents = list((example.get("context") or {}).get("documents") or [])
    transcript = _Transcript()
    loop = AgentLoop(provider, default_registry(), max_steps=args.max_steps, max_tokens=args.max_tokens)
    transcript.out(
        f"provider: {provider.name} / model: {provider.model} / native tools: {provider.native_tools}"
    )
    if example:
        transcript.out(f"example: {example.get('question_id')} (gold answer: {example.get('answer')!r})")
    transcript.out(f"question: {question}")
    started = time.perf_counter()
    try:
        result = await loop.run(question, context=ToolContext(documents=documents), on_report=transcript)
    finally:
        await provider.aclose()
    transcript.result(result, wall=time.perf_counter() - started)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write("\n".join(transcript.lines) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentlab.agent", description="Run the agent on one question."
    )
    parser.add_argument("question", nargs="?")
    parser.add_argument("--jsonl", help="a dataset JSONL file; the question is taken from line --index")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--base-url")
    parser.add_argument("--api-key")
    parser.add_argument("--model")
    parser.add_argument("--gguf")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--out", help="also write the transcript to this file")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
