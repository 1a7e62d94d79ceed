"""Replay recorded chat turns under a changed system prompt on the stub LLM, and print the divergence table.

    python bench/replay_divergence.py [--turns 50] [--concurrency 4]

Starts a stub OpenAI-compatible server whose scripted agent picks its tool
calls from the question and its system prompt, records ``--turns`` chat
turns answered by it under the default prompt (the same services and driver
as the chat page's turns, owned by a user of a new group), then runs
``manage.py replay_turns --turns --group G --system-prompt …`` over exactly
those turns: the recorded tool results are served while the new agent follows
the recorded path, and the command prints each turn's verdict and the
replay's figures — the share identical, the divergence table, new answers
(docs/benchmarks.md#replay). Runs on the environment's database
(``DATABASE_URL``; nothing set: SQLite under ``var/``); prints the requests
the stub answered and the tools really run, which are the read-only ones
after a divergence only with ``--live``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CHANGED_PROMPT = "CAREFUL: check facts in the documents before you compute; show your work."


def plan(index: int, careful: bool) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the scripted agent makes for question ``index``: the
    recorded agent computes, looks up every other question and checks every
    third; the careful one (the changed prompt) looks up first on every
    fourth question, checks with another expression on every fifth, and
    otherwise does what the recorded agent did."""
    a, b = index + 2, index + 3
    calls: list[tuple[str, dict[str, Any]]] = [("calculator", {"expression": f"{a}*{b}"})]
    if index % 2 == 0:
        calls.append(("search_documents", {"query": f"product of {a} and {b}"}))
    if index % 3 == 0:
        calls.append(("calculator", {"expression": f"{b}*{a}"}))
    if careful and index % 4 == 1:
        calls.insert(0, ("search_documents", {"query": f"{a} times {b}"}))
    elif careful and index % 5 == 2 and len(calls) > 1:
        calls[-1] = ("calculator", {"expression": f"({a})*({b})"})
    return calls


def agent(body: dict[str, Any]) -> Any:
    """The stub's handler: the next call of the plan, then the answer (the
    careful agent words every seventh answer differently)."""
    from agentlab.testing.stub_llm import final_answer_reply, tool_call_reply

    messages = body["messages"]
    system = str(messages[0].get("content") or "") if messages[0]["role"] == "system" else ""
    careful = "CAREFUL" in system
    question = next(str(m["content"]) for m in messages if m["role"] == "user")
    index = int(question.split("#")[1].split(":")[0])
    calls = plan(index, careful)
    done = sum(1 for m in messages if m["role"] == "tool")
    if done < len(calls):
        return tool_call_reply(*calls[done])
    product = (index + 2) * (index + 3)
    answer = f"The product is {product}." if careful and index % 7 == 3 else str(product)
    return final_answer_reply(answer, evidence="calculator")


def record(owner: Any, *, base_url: str, turns: int) -> None:
    """``turns`` chat turns of ``owner`` answered by the recorded agent."""
    from common.db import DatabaseThreads
    from turns.driver import EVALUATION, drive_turn
    from turns.llm import get_provider
    from turns.services import turn_create

    provider = get_provider(model="stub-model", base_url=base_url, api_key="bench")
    db = DatabaseThreads(max_workers=4)

    async def one(index: int) -> None:
        turn = await db.run(
            turn_create, owner=owner, question=f"Question #{index}: what is {index + 2} * {index + 3}?"
        )
        await drive_turn(turn.pk, policy=EVALUATION, provider=provider, db=db)

    async def all_of_them() -> None:
        await asyncio.gather(*(one(i) for i in range(turns)))
        await provider.aclose()

    try:
        asyncio.run(all_of_them())
    finally:
        db.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--live", action="store_true", help="replay with --live (read-only tools after a divergence)"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from agentlab.testing.stub_llm import StubLLMServer
    from turns.models import EventType, TurnEvent, TurnKind

    tag = secrets.token_hex(3)
    group = Group.objects.create(name=f"replay-bench-{tag}")
    owner = get_user_model().objects.create_user(f"replay-bench-{tag}")
    owner.groups.add(group)
    with StubLLMServer(agent) as stub:
        started = time.perf_counter()
        record(owner, base_url=stub.base_url, turns=args.turns)
        recorded = stub.request_count
        seconds = time.perf_counter() - started
        print(f"recorded {args.turns} chat turns: {recorded} LLM requests, {seconds:.1f} s")
        started = time.perf_counter()
        options = ["--live"] if args.live else []
        call_command(
            "replay_turns",
            "--turns",
            "--group",
            group.name,
            "--base-url",
            stub.base_url,
            "--model",
            "stub-model",
            "--system-prompt",
            CHANGED_PROMPT,
            "--concurrency",
            str(args.concurrency),
            "--name",
            f"replay-bench-{tag}",
            *options,
        )
        ran = TurnEvent.objects.filter(turn__kind=TurnKind.REPLAY, turn__owner__username__contains=tag)
        seconds = time.perf_counter() - started
        print(
            f"replayed in {seconds:.1f} s: {stub.request_count - recorded} LLM requests, "
            f"{ran.filter(type=EventType.TOOL_STARTED).count()} tools run, "
            f"{ran.filter(type=EventType.TOOL_RESULT, data__replayed=True).count()} recorded results served"
        )


if __name__ == "__main__":
    main()
