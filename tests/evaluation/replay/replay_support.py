"""A scripted agent on the stub OpenAI-compatible server, and recorded chat
turns it answered, for the replay tests and ``bench/replay_divergence.py``.

The agent's plan depends on its system prompt: the default prompt (the
recorded agent) calls ``calculator`` then ``count``; a prompt holding one of
``PLANS``' markers follows that plan. After its plan it answers ``42``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from agentlab.agent.extensions import Extensions
from agentlab.testing.stub_llm import StubReply, final_answer_reply, tool_call_reply
from common.db import DatabaseThreads
from turns.driver import EVALUATION, drive_turn
from turns.llm import get_provider
from turns.services import conversation_create, turn_create

RECORDED_PLAN: tuple[tuple[str, dict[str, Any]], ...] = (
    ("calculator", {"expression": "6*7"}),
    ("count", {"label": "recorded"}),
)

#: a marker in the system prompt → the plan of tool calls the agent makes
PLANS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    # another tool at step 2: a read-only one
    "SEARCH-FIRST": (("calculator", {"expression": "6*7"}), ("search_documents", {"query": "forty-two"})),
    # a read-only tool at step 2, then a side-effecting one
    "SEARCH-THEN-COUNT": (
        ("calculator", {"expression": "6*7"}),
        ("search_documents", {"query": "forty-two"}),
        ("count", {"label": "after-divergence"}),
    ),
    # the same path, another answer
    "SAME-PATH": RECORDED_PLAN,
}


class ScriptedAgent:
    """The stub's handler: the next call of the plan the system prompt picks
    (a step is the number of tool results in the messages so far), then
    ``final_answer``. ``hold``: an event the reply at step 2 waits for
    (``None``: answer at once), so a test can kill a drive mid-turn."""

    def __init__(self) -> None:
        self.hold: threading.Event | None = None

    def __call__(self, body: dict[str, Any]) -> StubReply:
        messages = body["messages"]
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        plan = next((p for marker, p in PLANS.items() if marker in (system or "")), RECORDED_PLAN)
        done = sum(1 for m in messages if m["role"] == "tool")
        if done == 1 and self.hold is not None:
            self.hold.wait(timeout=10)
        if done < len(plan):
            name, arguments = plan[done]
            return tool_call_reply(name, arguments)
        answer = "forty-two" if "SAME-PATH" in (system or "") else "42"
        return final_answer_reply(answer, evidence="calculator said 42")


def record_chat_turns(
    owner: Any, *, base_url: str, questions: Sequence[str], conversation: bool = False
) -> list[int]:
    """Chat turns of ``owner`` answered by the recorded agent at ``base_url``
    (with the ``count`` plugin), one after the other: their ids. With
    ``conversation``, all in one conversation (each later turn given the
    earlier ones as its history)."""
    provider = get_provider(model="stub-model", base_url=base_url, api_key="test-key")
    db = DatabaseThreads(max_workers=2)
    chat = conversation_create(owner=owner, title="recorded") if conversation else None

    async def drive_all() -> list[int]:
        ids = []
        for question in questions:
            turn = await db.run(turn_create, owner=owner, question=question, conversation=chat)
            await drive_turn(
                turn.pk,
                policy=EVALUATION,
                provider=provider,
                db=db,
                extensions=Extensions(plugins=("count",)),
            )
            ids.append(turn.pk)
        await provider.aclose()
        return ids

    try:
        return asyncio.run(drive_all())
    finally:
        db.close()
