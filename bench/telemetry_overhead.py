"""What telemetry costs: ``run_eval`` throughput and chat-turn p50 latency
with tracing (to a local OTLP/HTTP receiver) and metrics on, against both
off, in rounds that alternate in one run (on/off, then off/on, so a drift of
the machine falls on both alike).

"On" is ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a receiver in this process
(``agentlab.testing.otlp_receiver``, decoding every request) with the SDK's
default batch processor, ``AGENTLAB_METRICS=true`` and
``PROMETHEUS_MULTIPROC_DIR`` set (the multiprocess mode writes each value to
a memory-mapped file); "off" is no endpoint and ``AGENTLAB_METRICS=false``.
Both use the stub OpenAI-compatible server (``agentlab.testing.stub_llm``,
one ``final_answer`` call per turn after ``--latency-ms``) and PostgreSQL.

- ``run_eval``: ``manage.py run_eval`` over ``--examples`` generated examples
  at ``--concurrency`` in process (``bench/eval_throughput.py``'s helpers);
  samples/s as run_eval stores it, and the command's CPU ms per example.
- chat turns: a child process drives ``--chat-turns`` chat turns one after
  another through ``drive_turn`` under the chat policy (streamed, as the chat
  page's are; ``bench/stream_latency.py`` drives its turn the same way), with
  the OpenAI-compatible provider at the stub; the latency of each is
  ``turn_create`` to its terminal event; the p50, and its CPU ms per turn.

The last lines give on ÷ off for each (the target: at most 5 % slower).
``--trace-out FILE`` writes one chat turn's trace with a tool call (driven
first, against a scripted stub) as the receiver decoded it.

    python bench/telemetry_overhead.py [--examples 400] [--latency-ms 50] [--concurrency 32]
        [--chat-turns 80] [--rounds 3] [--trace-out FILE]
        [--pg-url postgres://postgres@127.0.0.1:5432/agentlab_bench_telemetry]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eval_throughput import database_env, run_eval, start_stub, write_examples

from agentlab.testing.otlp_receiver import OTLPReceiver, ReceivedSpan

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "on")
#: OTLP's span kinds and status codes by number (opentelemetry-proto's trace.proto)
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUSES = {0: "unset", 1: "ok", 2: "error"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=400)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--chat-turns", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trace-out", type=Path, default=None)
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/agentlab_bench_telemetry")
    parser.add_argument("--chat-child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--sample", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def mode_env(base: dict[str, str], mode: str, receiver: OTLPReceiver, tmpdir: Path) -> dict[str, str]:
    """``base`` with telemetry on (tracing to ``receiver``, metrics in a fresh
    multiprocess directory) or off."""
    env = dict(base)
    if mode == "off":
        env["AGENTLAB_METRICS"] = "false"
        return env
    prom = Path(tempfile.mkdtemp(prefix="prom-", dir=tmpdir))
    env.update(
        {
            "AGENTLAB_METRICS": "true",
            "PROMETHEUS_MULTIPROC_DIR": str(prom),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "agentlab-bench",
        }
    )
    return env


def chat_round(env: dict[str, str], turns: int, sample: bool = False) -> dict[str, Any]:
    """The chat child in ``env``: its latencies (s) and CPU seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--chat-child", str(turns)]
    proc = subprocess.run(
        [*cmd, *(["--sample"] if sample else [])], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"the chat child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def chat_child(turns: int, sample: bool) -> None:
    """Drive ``turns`` chat turns one by one (see the module docstring) and
    print ``{"latencies": [...], "cpu_s": …}``; ``sample``: first one with a
    tool call against a scripted stub, not measured."""
    import asyncio

    import django

    sys.path.insert(0, str(ROOT))  # the project's apps, as manage.py finds them
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.contrib.auth import get_user_model

    from agentlab.telemetry import flush_tracing
    from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply, tool_call_reply
    from common.db import DatabaseThreads
    from turns.driver import CHAT, drive_turn
    from turns.llm import get_provider
    from turns.models import Conversation
    from turns.services import turn_create

    user, _ = get_user_model().objects.get_or_create(username="bench-telemetry")
    conversation = Conversation.objects.create(owner=user, title="telemetry bench")

    async def drive(count: int, provider: Any) -> list[float]:
        db = DatabaseThreads(max_workers=4)
        latencies = []
        try:
            for i in range(count):
                started = time.perf_counter()
                turn = await db.run(
                    turn_create, owner=user, question=f"What is {i} + 0?", conversation=conversation
                )
                result = await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db)
                latencies.append(time.perf_counter() - started)
                assert result is not None and result.outcome == "answered", result
        finally:
            db.close()
        return latencies

    if sample:
        replies = [tool_call_reply("calculator", {"expression": "6*7"}), final_answer_reply("42", "calc")]
        with StubLLMServer.script(replies) as stub:
            asyncio.run(drive(1, get_provider(base_url=stub.base_url, model="stub-model")))
        flush_tracing(10)

    async def measured() -> tuple[list[float], float]:
        provider = get_provider()  # its HTTP client belongs to this event loop
        await drive(2, provider)  # warm: the client's connection, the first queries
        cpu = time.process_time()
        latencies = await drive(turns, provider)
        return latencies, time.process_time() - cpu

    latencies, cpu = asyncio.run(measured())
    print(json.dumps({"latencies": latencies, "cpu_s": cpu}))


def format_trace(spans: list[ReceivedSpan]) -> str:
    """One trace as a tree: each span with its ids, parent, duration and attributes."""
    by_parent: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_parent.setdefault(span.parent_id, []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: s.start_ns):
            pad = "    " * depth
            ms = (span.end_ns - span.start_ns) / 1e6
            lines.append(
                f"{pad}{span.name}  span_id={span.span_id} parent_id={span.parent_id or '-'} "
                f"kind={KINDS.get(span.kind, span.kind)} status={STATUSES.get(span.status_code)} {ms:.1f} ms"
            )
            for key, value in sorted(span.attributes.items()):
                lines.append(f"{pad}    {key} = {value!r}")
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join([f"trace_id={spans[0].trace_id} service.name={spans[0].service}", *lines])


def sample_trace(receiver: OTLPReceiver) -> str | None:
    """The trace of the chat turn with a tool call, if the receiver has it."""
    for root in receiver.by_name("agentlab.turn"):
        spans = [s for s in receiver.spans if s.trace_id == root.trace_id]
        if any(s.name == "execute_tool calculator" for s in spans):
            return format_trace(spans)
    return None


def measure(args: argparse.Namespace, env: dict[str, str], receiver: OTLPReceiver, tmp: Path) -> list[dict]:
    """Every round's figures: per mode, run_eval samples/s and CPU ms per
    example, chat p50 (ms) and CPU ms per turn."""
    rows = []
    for i in range(args.rounds):
        for mode in MODES if i % 2 == 0 else tuple(reversed(MODES)):
            run_env = mode_env(env, mode, receiver, tmp)
            metrics, cpu = run_eval(
                run_env, args.dataset, f"tel-{mode}-{i}-{os.getpid()}", args.concurrency, 0, tmp / "out.json"
            )
            assert metrics["total"] == args.examples and metrics["correct"] == args.examples, metrics
            chat = chat_round(
                run_env, args.chat_turns, sample=bool(args.trace_out) and mode == "on" and i == 0
            )
            row = {
                "round": i + 1,
                "mode": mode,
                "samples_per_s": metrics["throughput"]["samples_per_s"],
                "eval_cpu_ms": cpu * 1000 / args.examples,
                "chat_p50_ms": statistics.median(chat["latencies"]) * 1000,
                "chat_cpu_ms": chat["cpu_s"] * 1000 / args.chat_turns,
            }
            rows.append(row)
            print(
                f"round {row['round']} {mode:>3}: run_eval {row['samples_per_s']:7.1f} samples/s "
                f"({row['eval_cpu_ms']:.2f} CPU ms/example); chat p50 {row['chat_p50_ms']:6.1f} ms "
                f"({row['chat_cpu_ms']:.2f} CPU ms/turn); spans received so far {len(receiver.spans)}",
                flush=True,
            )
    return rows


def print_ratios(rows: list[dict]) -> None:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["mode"] == mode)

    print("medians over the rounds (on / off):")
    for key, label, slower_when in (
        ("samples_per_s", "run_eval throughput (samples/s)", "lower"),
        ("eval_cpu_ms", "run_eval CPU per example (ms)", "higher"),
        ("chat_p50_ms", "chat-turn latency p50 (ms)", "higher"),
        ("chat_cpu_ms", "chat-turn CPU per turn (ms)", "higher"),
    ):
        on, off = med("on", key), med("off", key)
        ratio = on / off
        slower = (1 - ratio) if slower_when == "lower" else (ratio - 1)
        print(f"  {label}: {on:.2f} / {off:.2f} = {ratio:.3f}  ({slower * 100:+.1f}% slower with telemetry)")


def main() -> int:
    args = parse_args()
    if args.chat_child:
        chat_child(args.chat_child, args.sample)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="telemetry-bench-"))
    args.dataset = tmp / f"telemetry-{args.examples}.jsonl"  # the dataset is named after the file
    write_examples(args.dataset, args.examples)
    stub, base_url = start_stub(args.latency_ms)
    receiver = OTLPReceiver().start()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLAB_", "CELERY_", "OTEL_"))}
    base.pop("PROMETHEUS_MULTIPROC_DIR", None)
    base.update(
        {
            "AGENTLAB_LLM_BASE_URL": base_url,
            "AGENTLAB_MODEL": "stub-model",
            "AGENTLAB_REVIEW": "false",
            "LOG_LEVEL": "ERROR",
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
    )
    try:
        env = database_env(base, "postgres", args, tmp)
        print(
            f"telemetry overhead: stub latency {args.latency_ms} ms, run_eval {args.examples} examples at "
            f"concurrency {args.concurrency} in process, {args.chat_turns} chat turns one by one, "
            f"{args.rounds} rounds alternating, PostgreSQL, {os.cpu_count()} cores",
            flush=True,
        )
        rows = measure(args, env, receiver, tmp)
        print_ratios(rows)
        print(f"the receiver decoded {len(receiver.spans)} spans in {receiver.requests} requests")
        if args.trace_out is not None:
            trace = sample_trace(receiver)
            args.trace_out.write_text((trace or "no sample trace was received") + "\n")
            print(f"one chat turn's trace: {args.trace_out}")
    finally:
        receiver.stop()
        stub.terminate()
        stub.wait()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"children's CPU: {usage.ru_utime + usage.ru_stime:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
