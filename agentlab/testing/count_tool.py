"""TEST ONLY: a ``count`` tool whose side effect survives the process.

``AGENTLAB_TEST_TOOLS=1`` adds it to the registry background turns use
(``turns.driver.job.job_tools``), so an end-to-end test can count side
effects in a worker process it does not share memory with.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

from agentlab.agent.tools import Tool, ToolContext

#: The environment variable that turns the test tools on (``"1"``).
TEST_TOOLS_ENV = "AGENTLAB_TEST_TOOLS"


def count_tool_enabled() -> bool:
    """Whether ``AGENTLAB_TEST_TOOLS=1`` is set."""
    return os.environ.get(TEST_TOOLS_ENV) == "1"


class CountArgs(BaseModel):
    label: str


async def _count(args: CountArgs, _ctx: ToolContext) -> str:
    await asyncio.sleep(float(os.environ.get("AGENTLAB_TEST_COUNT_DELAY_S", "0") or 0))
    path = Path(os.environ["AGENTLAB_TEST_COUNT_FILE"])
    with path.open("a", encoding="utf-8") as fh:
        fh.write(args.label + "\n")
    return f"counted {args.label}"


def count_tool() -> Tool:
    """``count(label)`` sleeps ``AGENTLAB_TEST_COUNT_DELAY_S`` and then
    appends ``label`` as one line to ``AGENTLAB_TEST_COUNT_FILE``: a side effect
    that survives the process, written last so that a kill during the sleep
    leaves no line for a call whose result was never recorded. With
    ``AGENTLAB_TEST_COUNT_APPROVAL=1`` it needs a human's approval."""
    return Tool(
        name="count",
        description="Count a label once (test tool).",
        parameters=CountArgs,
        fn=_count,
        needs_approval=os.environ.get("AGENTLAB_TEST_COUNT_APPROVAL") == "1",
    )
