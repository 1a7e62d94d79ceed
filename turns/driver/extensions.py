"""The driver's side of plugins and MCP servers (docs/extending.md).

For each attempt the driver asks ``attempt_setup`` for the tools, the system
prompt and the plugins it runs with (``agentlab.agent.extensions``), and when
the act phase is over ``attempt_checks`` for the ``check`` events of its
steps (``agentlab_step_checked``, one call per step the attempt took itself)
and of the attempt (``agentlab_turn_finished``), plus any plugin failure met
while setting up. Those events are appended with the attempt's next write —
the review phase's first event or the terminal event — so a check is never
recorded for a step whose turn could still be resumed into running it again.

An MCP server that cannot be used at the start is ``ExtensionsUnavailable``:
the driver fails the turn with its message (a turn is not measured without
the tools it was given).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agentlab.agent.extensions import Extensions, TurnSetup, turn_setup
from agentlab.agent.loop import AgentLoop, LoopResult
from agentlab.agent.mcp.hub import MCPUnavailable
from agentlab.agent.plugins import CheckRecord, PluginContext, TurnSummary
from agentlab.agent.tools import ToolContext, ToolRegistry
from agentlab.agent.usage import UsageTotals
from turns.driver.lease import ClaimedTurn
from turns.event_types import CheckData
from turns.events import NewEvent
from turns.meta import AttemptSetup, OfferedTool, TurnMeta, meta_with_extensions
from turns.models import EventType


class ExtensionsUnavailable(Exception):
    """An MCP server of the turn cannot be started or reached."""


@dataclass(frozen=True)
class Subject:
    """What an evaluation turn is about, for plugins: the example
    (``PluginContext.example``), its run and its dataset. Chat turns have none."""

    example: Mapping[str, Any] | None = None
    run_id: str | None = None
    dataset: str | None = None


def plugin_context(
    turn: ClaimedTurn, *, kind: str, attempt: int, question: str, subject: Subject | None
) -> PluginContext:
    """What plugins are told about this attempt of ``turn``."""
    context = turn.context or {}
    subject = subject or Subject()
    return PluginContext(
        kind="evaluation" if kind == "evaluation" else "chat",
        question=question,
        turn_id=turn.id,
        attempt=attempt,
        example=subject.example,
        documents=list(context.get("documents") or []),
        metadata=dict(context),
        run_id=subject.run_id,
        dataset=subject.dataset,
    )


async def attempt_setup(extensions: Extensions, *, tools: ToolRegistry, context: PluginContext) -> TurnSetup:
    """The attempt's tools, system prompt and plugins; raises
    ``ExtensionsUnavailable`` for an MCP server that cannot be used and
    ``PluginError`` for a plugin that cannot be loaded."""
    try:
        return await turn_setup(extensions, tools=tools, context=context, example=context.example)
    except MCPUnavailable as exc:
        raise ExtensionsUnavailable(str(exc)) from None


def meta_after_setup(meta: TurnMeta, extensions: Extensions, setup: TurnSetup) -> TurnMeta:
    """``meta`` recording what the turn runs with (unchanged without extensions)."""
    if not extensions:
        return meta
    return meta_with_extensions(
        meta,
        plugins=setup.plugins.names if setup.plugins is not None else [],
        mcp_servers=[server.name for server in extensions.mcp_servers],
        system_prompt=setup.prompt_plugin,
    )


def attempt_setup_record(
    loop: AgentLoop, *, question: str, context: ToolContext, attempt: int
) -> AttemptSetup:
    """What ``loop`` gives the model at the start of attempt ``attempt``: the
    system prompt of its first call (``AgentLoop.build_messages``, exactly as
    sent) and the tools offered in ``context`` to this question — for a
    constrained model the ones its prompt names (``AgentLoop.offered_tools``),
    not every tool the registry has."""
    first = loop.build_messages(question, [], context=context)[0]
    offered = loop.offered_tools(question, context)
    return AttemptSetup(
        attempt=attempt,
        system_prompt=str(first.get("content") or "") if first.get("role") == "system" else "",
        tools=[OfferedTool(name=tool.name, description=tool.description) for tool in offered],
        native_tools=loop.native_tools,
    )


def check_events(
    records: Sequence[CheckRecord], *, attempt: int, scope: str, step: int | None
) -> list[NewEvent]:
    """``check`` events for ``records``."""
    return [
        NewEvent(
            EventType.CHECK,
            cast(CheckData, {"attempt": attempt, "scope": scope, "step": step, **record.to_dict()}),
        )
        for record in records
    ]


async def attempt_checks(
    setup: TurnSetup, *, context: PluginContext, result: LoopResult, inherited_steps: int = 0
) -> list[NewEvent]:
    """The ``check`` events of an attempt that ended with ``result``: the
    failures met setting it up, each step's checks (skipping the first
    ``inherited_steps``, which belong to the attempts it continues) and the
    attempt's own."""
    attempt = context.attempt
    events = check_events(setup.checks, attempt=attempt, scope="turn", step=None)
    plugins = setup.plugins
    if plugins is None:
        return events
    if plugins.implements("agentlab_step_checked"):
        for step in result.steps[inherited_steps:]:
            records = await plugins.step_checks(step, context)
            events += check_events(records, attempt=attempt, scope="step", step=step.index)
    if plugins.implements("agentlab_turn_finished"):
        summary = TurnSummary(
            stop_reason=result.stop_reason,
            answer=result.answer,
            evidence=result.evidence,
            reasoning=result.reasoning,
            question=result.question,
            steps=tuple(result.steps),
            usage=result.usage.to_dict(),
            error=result.error,
        )
        events += check_events(
            await plugins.turn_checks(summary, context), attempt=attempt, scope="turn", step=None
        )
    return events


def unavailable_result(error: str, *, recorded: Sequence[Any], usage: UsageTotals) -> LoopResult:
    """The result of an attempt that could not start: stop reason ``error``."""
    return LoopResult(
        stop_reason="error",
        answer="",
        evidence="",
        reasoning="",
        question=None,
        steps=list(recorded),
        steps_used=len(recorded),
        usage=usage,
        error=error,
    )
