"""The agent loop: ask the LLM, run the tools it asks for, repeat, answer.

One ``AgentLoop.run`` is one attempt at one turn. Each step is one LLM call
(``complete_with_retries``) followed by the tool calls it asked for, in order.
Every completion and every tool result is handed to ``on_report`` *before* the
loop goes on, so the driver can append it to the turn's event log; on resume
the driver passes those recorded steps back as ``recorded`` and the loop
rebuilds the conversation from them without calling the LLM or the tools again
(docs/architecture.md#the-driver; docs/architecture.md#the-agent-core).

The model is offered the tools available in the turn's ``ToolContext``
(``ToolRegistry.offered``): the tool specs of each call, and, without native
tools, the tool list in the system prompt. A call of a tool that is not
available is answered like an unknown tool (``ToolRegistry.execute``).

The loop never raises for what the model, a tool or a provider did: it ends
with a ``LoopResult`` whose ``stop_reason`` says why (docs/architecture.md#the-turn-lifecycle). Only an
exception from ``on_report`` (the driver could not record a step — going on
would lose it) and ``asyncio.CancelledError`` propagate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from agentlab.agent.embedded import StepSchemas, arrange_tools, schema_for_step, step_schemas
from agentlab.agent.messages import build_messages, step_calls
from agentlab.agent.protocol import parse_tool_calls

# re-exported: the loop's reports have always been importable from here
from agentlab.agent.reports import CompletionReport as CompletionReport
from agentlab.agent.reports import LLMRequest
from agentlab.agent.reports import OnReport as OnReport
from agentlab.agent.reports import Report as Report
from agentlab.agent.reports import ToolResultReport as ToolResultReport
from agentlab.agent.reports import ToolStartReport as ToolStartReport
from agentlab.agent.results import EMPTY_ANSWER_ERROR as EMPTY_ANSWER_ERROR
from agentlab.agent.results import LoopResult as LoopResult
from agentlab.agent.results import Outcome
from agentlab.agent.retry import complete_with_retries
from agentlab.agent.stops import LoopStop, check_stop, guarded
from agentlab.agent.streaming import OnText, text_stream
from agentlab.agent.tools import ToolContext, ToolRegistry
from agentlab.agent.truncation import cut_note, json_type, mark_truncated_calls, schema_cut_call
from agentlab.agent.types import (
    Completion,
    LLMProvider,
    ProviderError,
    Step,
    StopReason,
    ToolCall,
    ToolResult,
    as_text,
)
from agentlab.agent.usage import UsageTotals

logger = logging.getLogger(__name__)

T = TypeVar("T")


ApprovalDecision = Literal["approved", "rejected", "unavailable"]
ApprovalGate = Callable[[ToolCall], Awaitable[ApprovalDecision]]
#: chat messages (the history a turn is given: ``agentlab.agent.history``)
Msgs = Sequence[dict[str, Any]]


class _ReportFailed(Exception):
    """Carries an exception raised by ``on_report`` past the loop's catch-all."""

    def __init__(self, error: BaseException):
        super().__init__(repr(error))
        self.error = error


@dataclass
class _Run:
    question: str
    context: ToolContext
    #: the tools offered in ``context`` (``ToolRegistry.offered``)
    tools: ToolRegistry
    on_report: OnReport | None
    cancel: asyncio.Event | None
    approval: ApprovalGate | None
    deadline: float | None
    on_text: OnText | None = None
    history: Msgs = ()
    steps: list[Step] = field(default_factory=list)
    usage: UsageTotals = field(default_factory=UsageTotals)
    #: the schemas a constrained model's steps decode under (``embedded``);
    #: ``None``: native tool calls, or a provider without constrained decoding
    schemas: StepSchemas | None = None


class AgentLoop:
    """Runs the think → tool → observe loop for one question.

    ``max_steps`` bounds the LLM calls (recorded ones included).
    ``system_prompt`` replaces the default job description; for providers
    without native tools the tool list and the JSON-in-text protocol are
    always appended, and a provider with ``constrained_decoding`` decodes
    each step under ``protocol.step_schema`` of the offered tools (one call
    of one of them, with its arguments' schema). ``max_tokens`` /
    ``temperature`` are passed to every call (a reply cut by ``max_tokens``:
    ``agentlab.agent.truncation``); ``retry_attempts`` is the total number of tries per LLM call for
    transient errors (``retry_base_delay`` seconds before the first retry,
    doubling).
    """

    def __init__(
        self,
        provider: LLMProvider,
        tools: ToolRegistry,
        *,
        max_steps: int = 8,
        system_prompt: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        retry_attempts: int = 4,
        retry_base_delay: float = 0.5,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.provider = provider
        self.tools = tools
        self.max_steps = max_steps
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.retry_attempts = retry_attempts
        self.retry_base_delay = retry_base_delay

    @property
    def native_tools(self) -> bool:
        return bool(getattr(self.provider, "native_tools", False))

    @property
    def constrained(self) -> bool:
        """Whether each step is decoded under a schema (the embedded local
        model: no native tools, ``constrained_decoding``)."""
        return not self.native_tools and bool(getattr(self.provider, "constrained_decoding", False))

    def offered_tools(self, question: str, context: ToolContext | None = None) -> ToolRegistry:
        """The tools offered to the model for ``question`` in ``context``
        (``None``: an empty one) — those its system prompt names."""
        return self._offered(question, context or ToolContext())

    def _offered(self, question: str, context: ToolContext) -> ToolRegistry:
        """The tools offered in a turn: those available in ``context``, for a
        constrained model arranged to the question (``embedded.arrange_tools``)."""
        tools = self.tools.offered(context)
        return arrange_tools(tools, question=question, context=context) if self.constrained else tools

    def build_messages(
        self, question: str, steps: Sequence[Step], *, context: ToolContext | None = None, history: Msgs = ()
    ) -> list[dict[str, Any]]:
        """The chat messages for the next LLM call after ``steps``
        (``agentlab.agent.messages.build_messages``), with the system prompt
        of the tools offered in ``context`` (``None``: an empty context, as
        in ``run``) and ``history`` before the question."""
        return self._messages(question, steps, self._offered(question, context or ToolContext()), history)

    def _messages(
        self, question: str, steps: Sequence[Step], tools: ToolRegistry, history: Msgs = ()
    ) -> list[dict[str, Any]]:
        return build_messages(
            question,
            steps,
            tools,
            native_tools=self.native_tools,
            base_prompt=self.system_prompt,
            compact=self.constrained,
            history=history,
        )

    def _calls_of(self, step: Step) -> list[ToolCall]:
        return step_calls(step, native_tools=self.native_tools)

    # ------------------------------------------------------------------ run

    async def run(
        self,
        question: str,
        *,
        context: ToolContext | None = None,
        on_report: OnReport | None = None,
        cancel: asyncio.Event | None = None,
        recorded: Sequence[Step] = (),
        approval: ApprovalGate | None = None,
        deadline: float | None = None,
        on_text: OnText | None = None,
        history: Msgs = (),
    ) -> LoopResult:
        """Answer ``question``; see the module docstring and ``LoopResult``.

        ``cancel`` is honoured within about a second, also during an LLM call,
        a tool or an approval wait (stop ``cancelled``); ``deadline`` is a
        ``time.monotonic()`` value (stop ``timeout``). ``recorded`` are steps of
        an earlier run of the same turn: they are neither repeated nor
        reported again; a partial last step has only its missing tool calls
        run. ``approval`` decides tools marked ``needs_approval`` (``None``:
        stop ``approval_required``). ``on_text``: ``streaming.text_stream``.
        ``history``: the conversation's earlier turns as messages, put
        between the system prompt and the question of every call
        (``agentlab.agent.history``).
        """
        context = context or ToolContext()
        run = _Run(
            question=question,
            context=context,
            tools=self._offered(question, context),
            on_report=on_report,
            cancel=cancel,
            approval=approval,
            deadline=deadline,
            on_text=on_text,
            history=history,
        )
        if self.constrained and len(run.tools):
            run.schemas = step_schemas(
                run.tools, question=question, context=context, max_steps=self.max_steps
            )
        for step in recorded:
            copied = Step(index=step.index, completion=step.completion, results=list(step.results))
            run.steps.append(copied)
            run.usage.add(copied.completion)
        try:
            outcome = await self._run(run)
        except _ReportFailed as exc:
            raise exc.error from None
        except LoopStop as stop:
            return self._result(
                run, Outcome(stop.stop_reason), error=stop.error, pending_call=stop.pending_call
            )
        except ProviderError as exc:
            reason: StopReason = "context_overflow" if exc.kind == "context_overflow" else "provider_error"
            return self._result(run, Outcome(reason), error=str(exc) or exc.kind)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("agent loop failed")
            return self._result(run, Outcome("error"), error=f"{type(exc).__name__}: {exc}")
        if (
            outcome.stop_reason == "max_steps"
            and run.steps
            and all(s.completion.truncated for s in run.steps)
        ):
            # every reply was cut: the limit is the cause, not the steps (under
            # schema-constrained decoding each cut reply became a malformed call)
            error = cut_note(self.max_tokens).replace("your reply", f"each of the {len(run.steps)} replies")
            return self._result(run, Outcome("length"), error=error)
        if outcome.stop_reason == "max_steps":
            return self._result(run, outcome, error=f"no final answer after {self.max_steps} steps")
        if outcome.stop_reason == "empty_answer":
            return self._result(run, outcome, error=EMPTY_ANSWER_ERROR)
        if outcome.stop_reason == "length":
            error = cut_note(self.max_tokens).replace("your reply", "the final answer")
            return self._result(run, outcome, error=error)
        return self._result(run, outcome)

    def _result(
        self,
        run: _Run,
        outcome: Outcome,
        *,
        error: str | None = None,
        pending_call: ToolCall | None = None,
    ) -> LoopResult:
        return LoopResult(
            stop_reason=outcome.stop_reason,
            answer=outcome.answer,
            evidence=outcome.evidence,
            reasoning=outcome.reasoning,
            question=outcome.question,
            steps=run.steps,
            steps_used=len(run.steps),
            usage=run.usage,
            error=error,
            pending_call=pending_call,
            answer_type=outcome.answer_type,
            partial_answer=outcome.partial_answer,
        )

    async def _run(self, run: _Run) -> Outcome:
        # 1. Recorded steps: a finished turn is returned as it was.
        for step in run.steps:
            outcome = self._recorded_outcome(step)
            if outcome is not None:
                return outcome
        # 2. A partial last step: run only the calls without a result.
        if run.steps:
            last = run.steps[-1]
            done = {r.call_id for r in last.results}
            missing = [c for c in self._calls_of(last) if c.id not in done]
            if missing:
                outcome = await self._run_calls(run, last, missing)
                if outcome is not None:
                    return outcome
        # 3. New steps.
        while len(run.steps) < self.max_steps:
            check_stop(run.cancel, run.deadline)
            index = len(run.steps) + 1
            request = self._request(run, index)
            completion = await self._guard(
                run,
                complete_with_retries(
                    self.provider,
                    request.messages,
                    request.tools,
                    attempts=self.retry_attempts,
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                    base_delay=self.retry_base_delay,
                    response_schema=request.response_schema,
                    stream=text_stream(run.on_text, index) if run.on_text is not None else None,
                ),
            )
            if not self.native_tools:
                completion = replace(
                    completion, tool_calls=tuple(parse_tool_calls(completion.text, step=index))
                )
            completion = mark_truncated_calls(completion, max_tokens=self.max_tokens)
            completion = schema_cut_call(completion, step=index, max_tokens=self.max_tokens)
            step = Step(index=index, completion=completion)
            run.steps.append(step)
            run.usage.add(completion)
            await self._report(run, CompletionReport(step=index, completion=completion, request=request))
            calls = list(completion.tool_calls)
            if not calls:
                return self._text_outcome(completion)
            outcome = await self._run_calls(run, step, calls)
            if outcome is not None:
                return outcome
        return Outcome("max_steps")

    def _request(self, run: _Run, index: int) -> LLMRequest:
        """Step ``index``'s call: what is passed to the provider, and reported."""
        return LLMRequest(
            messages=self._messages(run.question, run.steps, run.tools, run.history),
            tools=run.tools.specs() if self.native_tools and len(run.tools) else None,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            response_schema=self._schema_for(run, index),
        )

    def _schema_for(self, run: _Run, index: int) -> dict[str, Any] | None:
        """The schema step ``index`` decodes under (``embedded.schema_for_step``),
        ``None`` for a model that is not constrained."""
        if run.schemas is None:
            return None
        return schema_for_step(
            run.schemas, index=index, steps=run.steps, max_steps=self.max_steps, calls_of=self._calls_of
        )

    @staticmethod
    def _text_outcome(completion: Completion) -> Outcome:
        """A reply without a tool call: the final answer — unless the token
        limit cut it, which is stop reason ``length``, not an answer, or it
        is empty (``empty_answer``)."""
        text = (completion.text or "").strip()
        if completion.truncated:
            return Outcome("length", partial_answer=text)
        if not text:
            return Outcome("empty_answer")
        return Outcome("final", answer=text, answer_type="string")

    def _recorded_outcome(self, step: Step) -> Outcome | None:
        calls = self._calls_of(step)
        if not calls:
            return self._text_outcome(step.completion)
        by_id = {r.call_id: r for r in step.results}
        for call in calls:
            result = by_id.get(call.id)
            if result is not None:
                outcome = self._ending(call, result)
                if outcome is not None:
                    return outcome
        return None

    def _ending(self, call: ToolCall, result: ToolResult) -> Outcome | None:
        """The outcome when ``call`` (which produced ``result``) ends the turn."""
        if result.is_error:
            return None
        tool = self.tools.get(call.name)
        ends = tool.ends_turn if tool is not None else None
        if ends == "final":
            args = call.arguments
            answer = as_text(args.get("answer"))  # stored as given (a leading tab is the model's)
            if not answer.strip():  # "" or whitespace (or null) is no answer
                return Outcome("empty_answer")
            return Outcome(
                "final",
                answer=answer,
                evidence=as_text(args.get("evidence")),
                reasoning=as_text(args.get("reasoning")),
                answer_type=json_type(args.get("answer")),
            )
        if ends == "ask":
            return Outcome("asked", question=as_text(call.arguments.get("question")))
        return None

    async def _run_calls(self, run: _Run, step: Step, calls: list[ToolCall]) -> Outcome | None:
        for call in calls:
            check_stop(run.cancel, run.deadline)
            # an unavailable tool is not approved first: execute answers "unknown tool"
            tool = run.tools.get(call.name)
            if tool is not None and tool.needs_approval and call.error is None:
                decision: ApprovalDecision = "unavailable"
                if run.approval is not None:
                    decision = await self._guard(run, run.approval(call))
                if decision == "rejected":
                    raise LoopStop("approval_rejected", f"{call.name} was rejected", pending_call=call)
                if decision != "approved":
                    raise LoopStop("approval_required", f"{call.name} needs an approval", pending_call=call)
            context = run.context.for_call(call)
            if tool is not None and tool.ends_turn is None and call.error is None:
                start = ToolStartReport(
                    step=step.index, call=call, key=context.idempotency_key, repeat=context.may_have_run
                )
                await self._report(run, start)
            result = await self._guard(run, self.tools.execute(call, context))
            step.results.append(result)
            await self._report(run, ToolResultReport(step=step.index, call=call, result=result))
            outcome = self._ending(call, result)
            if outcome is not None:
                return outcome
        return None

    # ------------------------------------------------------------------ plumbing

    async def _report(self, run: _Run, report: Report) -> None:
        if run.on_report is None:
            return
        try:
            await run.on_report(report)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _ReportFailed(exc) from exc

    async def _guard(self, run: _Run, awaitable: Awaitable[T]) -> T:
        """``stops.guarded`` under this run's cancel flag and deadline."""
        return await guarded(awaitable, cancel=run.cancel, deadline=run.deadline)
