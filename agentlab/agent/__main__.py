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

from agentlab.agent.loop import AgentLoop, CompletionReport, Report, ToolStartReport
from agentlab.agent.providers import make_provider
from agentlab.agent.tools import ToolContext, default_registry


def _load_example(path: str, index: int) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        rows: list[dict[str, Any]] = [json.loads(line) for line in handle if line.strip()]
    return rows[index]


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
    provider = make_provider(
        base_url=args.base_url or os.environ.get("AGENTLAB_LLM_BASE_URL") or None,
        api_key=args.api_key or os.environ.get("AGENTLAB_LLM_API_KEY") or None,
        model=args.model or os.environ.get("AGENTLAB_MODEL") or None,
        gguf_path=args.gguf or os.environ.get("AGENTLAB_GGUF_PATH") or None,
    )
    documents = list((example.get("context") or {}).get("documents") or [])
    lines: list[str] = []
    llm_seconds = 0.0
    last = time.perf_counter()

    def out(text: str = "") -> None:
        lines.append(text)
        print(text, flush=True)

    async def on_report(report: Report) -> None:
        nonlocal last, llm_seconds
        now = time.perf_counter()
        if isinstance(report, ToolStartReport):
            return  # the tool's result says all there is to say here
        if isinstance(report, CompletionReport):
            c = report.completion
            llm_seconds += now - last
            out(
                f"--- step {report.step}: completion ({now - last:.2f} s, model {c.model}, "
                f"finish {c.finish_reason}, input {c.usage.input_tokens} / "
                f"output {c.usage.output_tokens} tokens)"
            )
            out(f"text: {c.text!r}")
            for call in c.tool_calls:
                detail = f" ERROR: {call.error}" if call.error else ""
                out(f"tool call {call.id}: {call.name or '(unparsed)'} {json.dumps(call.arguments)}{detail}")
            if not c.tool_calls:
                out("tool calls: none")
        else:
            flag = " (error)" if report.result.is_error else ""
            out(f"result of {report.call.id} {report.result.name}{flag}: {report.result.output}")
        last = time.perf_counter()

    loop = AgentLoop(provider, default_registry(), max_steps=args.max_steps, max_tokens=args.max_tokens)
    out(f"provider: {provider.name} / model: {provider.model} / native tools: {provider.native_tools}")
    if example:
        out(f"example: {example.get('question_id')} (gold answer: {example.get('answer')!r})")
    out(f"question: {question}")
    started = time.perf_counter()
    try:
        result = await loop.run(question, context=ToolContext(documents=documents), on_report=on_report)
    finally:
        await provider.aclose()
    wall = time.perf_counter() - started
    usage = result.usage
    out("=== result")
    out(f"stop reason: {result.stop_reason}" + (f" ({result.error})" if result.error else ""))
    out(f"answer: {result.answer!r}")
    out(f"evidence: {result.evidence!r}")
    out(f"reasoning: {result.reasoning!r}")
    if result.question is not None:
        out(f"clarifying question: {result.question!r}")
    out(f"steps used: {result.steps_used}")
    out(f"usage: {json.dumps(usage.to_dict())}")
    rate = usage.output_tokens / llm_seconds if llm_seconds > 0 else 0.0
    total_rate = (usage.input_tokens + usage.output_tokens) / llm_seconds if llm_seconds > 0 else 0.0
    out(
        f"time: {wall:.2f} s in all, {llm_seconds:.2f} s in LLM calls; "
        f"{rate:.1f} output tokens/s, {total_rate:.1f} "
        "prompt+output tokens/s over the LLM calls"
    )
    if hasattr(os, "getloadavg"):
        out(f"machine: {os.cpu_count()} CPUs, 1-minute load average {os.getloadavg()[0]:.2f} at the end")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
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
