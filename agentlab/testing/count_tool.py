"""TEST ONLY: a ``count`` tool whose side effect survives the process.

The example plugin's ``count`` entry point offers it to every turn of a
process started with ``AGENTLAB_PLUGINS=count``
(``agentlab_example_plugin.count``), so an end-to-end test can count side
effects in a worker process it does not share memory with.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

from agentlab.agent.tools import Tool, ToolContext


class CountArgs(BaseModel):
    label: str


#: Make ``count`` idempotent (``"1"``): a call whose idempotency key was
#: counted before returns at once and counts nothing.
IDEMPOTENT_ENV = "AGENTLAB_TEST_COUNT_IDEMPOTENT"


async def _count(args: CountArgs, ctx: ToolContext) -> str:
    await asyncio.sleep(float(os.environ.get("AGENTLAB_TEST_COUNT_DELAY_S", "0") or 0))
    path = Path(os.environ["AGENTLAB_TEST_COUNT_FILE"])
    key = ctx.idempotency_key or ""
    with path.with_name(path.name + ".calls").open("a", encoding="utf-8") as fh:
        fh.write(f"{args.label} {key} {'may-have-run' if ctx.may_have_run else 'first'}\n")
    keys = path.with_name(path.name + ".keys")
    if os.environ.get(IDEMPOTENT_ENV) == "1" and key and keys.exists() and key in keys.read_text().split():
        return f"counted {args.label} (already: {key})"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(args.label + "\n")
    if key:
        with keys.open("a", encoding="utf-8") as fh:
            fh.write(key + "\n")
    # the effect is done; a kill in this pause leaves it without its result
    await asyncio.sleep(float(os.environ.get("AGENTLAB_TEST_COUNT_AFTER_S", "0") or 0))
    return f"counted {args.label}"


def count_tool() -> Tool:
    """``count(label)`` sleeps ``AGENTLAB_TEST_COUNT_DELAY_S``, then appends
    ``label`` as one line to ``AGENTLAB_TEST_COUNT_FILE`` — a side effect that
    survives the process, written after the sleep so that a kill during it
    leaves no line for a call whose result was never recorded — and then
    sleeps ``AGENTLAB_TEST_COUNT_AFTER_S`` (a kill there leaves an effect
    without its result). Every call is logged as ``label key
    first|may-have-run`` in ``<file>.calls`` and its idempotency key in
    ``<file>.keys``; with ``AGENTLAB_TEST_COUNT_IDEMPOTENT=1`` a key already
    there counts nothing again (what a tool with side effects must do). With
    ``AGENTLAB_TEST_COUNT_APPROVAL=1`` it needs a human's approval."""
    return Tool(
        name="count",
        description="Count a label once (test tool).",
        parameters=CountArgs,
        fn=_count,
        needs_approval=os.environ.get("AGENTLAB_TEST_COUNT_APPROVAL") == "1",
    )
