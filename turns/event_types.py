"""The payload of every event type, in one place (docs/architecture.md#the-event-log;
CONTRIBUTING.md#shapes-in-one-place, 14).

One ``TypedDict`` per ``EventType`` value, listed in ``PAYLOADS``. Code that
builds an event builds its payload with these (``PhaseData(phase=…)``), so
mypy checks the keys; ``event_append_many`` checks that each payload has its
type's required keys (``payload_check``) and refuses the append otherwise.
Extra keys are not refused when appending (old rows and tests carry some),
but the shapes are closed (``extra="forbid"``) for a full check with
pydantic, as the tests do on the events of driven turns.

Every payload is JSON: what is appended goes through
``agentlab.agent.text.json_safe``. (Zulip ``zerver/lib/event_types.py``.)

Types whose keys are all optional (``thinking``, ``tool.result``,
``approval.requested``) are read defensively: a reader treats a step event
without ``step`` as not part of any step.
"""

# No ``from __future__ import annotations`` here: with string annotations a
# class-syntax TypedDict cannot see ``NotRequired`` on Python 3.11, and would
# count every key as required.
from collections.abc import Mapping
from typing import Any, NotRequired

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from turns.models import EventType

_CLOSED = ConfigDict(extra="forbid")

# The shape of ``ToolCall.to_dict()`` / ``ToolResult.to_dict()`` (agentlab.agent.types).


@with_config(_CLOSED)
class ToolCallData(TypedDict):
    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None
    error: str | None


@with_config(_CLOSED)
class ToolResultData(TypedDict):
    call_id: str
    name: str
    output: str
    is_error: bool


@with_config(_CLOSED)
class CompletionUsageData(TypedDict):
    """One completion's usage, as a review records it (tokens may be unknown)."""

    model: str
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    #: ``length``: cut by the output-token limit
    finish_reason: NotRequired[str | None]
    #: ``agentlab.agent.types.Decoding``: ``native``, ``schema`` or ``free``
    decoding: NotRequired[str | None]


# --- the turn's life ------------------------------------------------------------


@with_config(_CLOSED)
class TurnQueuedData(TypedDict):
    kind: str


@with_config(_CLOSED)
class TurnStartedData(TypedDict):
    attempt: int
    job_id: str


@with_config(_CLOSED)
class PhaseData(TypedDict):
    phase: str


# --- steps of an attempt (the driver's recorder; replayed on resume) -----------------


@with_config(_CLOSED)
class ThinkingData(TypedDict, total=False):
    attempt: int
    step: int
    text: str


@with_config(_CLOSED)
class LLMDeltaData(TypedDict):
    """Text of a streaming completion, coalesced by the driver
    (``turns.driver.record``): ``text`` continues the visible text of try
    ``completion`` (1, 2 …) of step ``step`` of attempt ``attempt`` at
    character ``offset`` (the length of that text before it). A new
    ``completion`` number starts the text again (a retried call): a reader
    replaces, not appends. The visible text is the answer, never raw JSON
    (``agentlab.agent.streaming``); the step's ``thinking`` / ``tool.call``
    events that follow are its record."""

    attempt: int
    step: int
    completion: int
    offset: int
    text: str


@with_config(_CLOSED)
class LLMRequestData(TypedDict):
    """The request of one agent step's LLM call as the provider got it
    (``agentlab.agent.reports.LLMRequest``). ``messages`` are the call's
    messages after its first ``shared`` ones, which are the first ``shared``
    messages of the previous request of the same attempt recorded in the log
    (a step's request repeats the one before it and adds its reply and tool
    results: the log keeps each message once). ``shared`` is 0 on the first
    request an attempt records — and on the first after a resume — so the
    full messages of a call are rebuilt exactly by walking the attempt's
    ``llm.usage`` events in seq order (``turns.requests.requests_of``)."""

    shared: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    temperature: float | None
    response_schema: dict[str, Any] | None


@with_config(_CLOSED)
class LLMUsageData(TypedDict):
    """One agent step's LLM call. ``finish_reason`` ``length``: cut by the
    output-token limit; ``decoding`` how its text was decoded
    (``agentlab.agent.types.Decoding``: ``native`` tool calls, ``schema``
    constrained to the step's JSON schema, ``free``); ``request`` what was
    sent (``LLMRequestData``). The last two are absent in logs written
    before they were recorded. ``cached``: ``true`` when the completion was
    served by the LLM-call cache (no request made; the tokens and cost are
    those reported when it was first made, and are not charged again);
    absent otherwise."""

    attempt: int
    step: int
    model: str
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    finish_reason: str | None
    decoding: NotRequired[str | None]
    request: NotRequired[LLMRequestData]
    cached: NotRequired[bool]


@with_config(_CLOSED)
class ToolCallEventData(TypedDict):
    attempt: int
    step: int
    call: ToolCallData


@with_config(_CLOSED)
class ToolStartedData(TypedDict):
    """Written before a tool that may have side effects runs (not before
    ``final_answer`` / ``ask_user``): a resume after a crash between this
    event and the call's ``tool.result`` knows the call may have run, runs it
    again with the same ``idempotency_key`` and says so with ``repeat``."""

    attempt: int
    step: int
    call_id: str
    name: str
    #: ``turn-<turn id>/attempt-<n>/<tool call id>`` (``ToolContext.for_call``)
    idempotency_key: str | None
    #: the log showed this call started before without a result
    repeat: bool


@with_config(_CLOSED)
class ToolResultEventData(TypedDict, total=False):
    attempt: int
    step: int
    result: ToolResultData


# --- plugins' checks ------------------------------------------------------------------


@with_config(_CLOSED)
class CheckData(TypedDict):
    """A plugin's verdict on one step (``scope: "step"``, ``step`` its index)
    or on an attempt (``scope: "turn"``, ``step`` ``None``): the
    ``CheckRecord`` of ``agentlab.agent.plugins``. A plugin that raised, timed
    out or returned something unreadable is a failed check named
    ``plugin_error:<plugin>`` with ``error`` set."""

    attempt: int
    scope: str
    step: int | None
    name: str
    passed: bool
    detail: Any
    plugin: str
    error: NotRequired[str]


# --- approvals -------------------------------------------------------------------


@with_config(_CLOSED)
class ApprovalRequestedData(TypedDict, total=False):
    approval_id: int
    call: ToolCallData
    #: ISO-8601, or ``None`` without ``APPROVAL_TIMEOUT_S``
    deadline: str | None
    #: the pending approval was found again when the turn was resumed
    resumed: bool


@with_config(_CLOSED)
class ApprovalResolvedData(TypedDict):
    approval_id: int
    status: str
    #: the deciding user's username; ``None`` when it expired
    by: str | None
    tool: str | None


# --- review and attempts -------------------------------------------------------------


@with_config(_CLOSED)
class ReviewData(TypedDict):
    """A review of one attempt; also kept as ``Turn.meta["review"]``."""

    attempt: int
    verdict: str
    note: str
    retry_instruction: str | None
    usage: CompletionUsageData | None
    #: arrived after a chat turn finished without it
    late: bool
    error: NotRequired[str]


@with_config(_CLOSED)
class PreviousAttemptData(TypedDict):
    attempt: int
    status: str
    outcome: str
    stop_reason: str
    answer: NotRequired[str]


#: ``reason``: ``"review"`` (the driver, on a retry verdict: with
#: ``instruction``), ``"retry"`` (``turn_retry``: with ``from`` and ``by``) or
#: ``"continue"`` (``turn_continue``: also ``extra_steps`` and ``max_steps``).
AttemptRetryData = TypedDict(
    "AttemptRetryData",
    {
        "attempt": int,
        "reason": str,
        "previous": PreviousAttemptData,
        "instruction": NotRequired[str | None],
        "from": NotRequired[str],
        "by": NotRequired[str | None],
        "extra_steps": NotRequired[int],
        "max_steps": NotRequired[int],
    },
)
# ``with_config`` as a statement: the functional syntax (``from`` is a keyword)
AttemptRetryData.__pydantic_config__ = _CLOSED  # type: ignore[attr-defined]


# --- a conversation's history -----------------------------------------------------


@with_config(_CLOSED)
class HistoryDroppedData(TypedDict):
    turn: int
    position: int
    #: ``budget`` (it did not fit), else what ended it: ``cancelled``,
    #: ``failed``, ``rejected``, ``interrupted`` …
    reason: str


@with_config(_CLOSED)
class HistoryData(TypedDict):
    """What a turn of a conversation was given of the turns before it
    (``agentlab.agent.history.History.to_data``), written before its first
    LLM call; a resume, a retry and a review's retry give the turn these
    ``messages`` again rather than reading the conversation anew.
    ``attempt``: the attempt that first got it; ``mode``: ``answers`` or
    ``full``; ``turns``: the ids of the earlier turns given, oldest first;
    ``tokens``: their messages' size (``counted``: ``tokenizer`` or
    ``estimate``) within ``budget``, from a context ``window`` less
    ``reply_tokens``; ``dropped``: the earlier turns not given and why."""

    attempt: int
    mode: str
    turns: list[int]
    tokens: int
    budget: int
    window: int
    reply_tokens: int
    counted: str
    dropped: list[HistoryDroppedData]
    messages: list[dict[str, Any]]


# --- terminal and lifecycle events -------------------------------------------------------


@with_config(_CLOSED)
class TurnAnsweredData(TypedDict):
    stop_reason: str
    steps: int
    answer: str
    evidence: str
    reasoning: str
    #: the JSON type the model gave the answer in (``string``, ``number``,
    #: ``array``, ``object`` …; the answer is its text either way)
    answer_type: NotRequired[str]
    #: the answer's review was still running when the turn finished (a chat
    #: turn waits ``REVIEW_WAIT_S``): it follows as a ``review`` event with
    #: ``late: true``, and a stream stays open for it (turns.live)
    review_pending: NotRequired[bool]


@with_config(_CLOSED)
class TurnAskedData(TypedDict):
    stop_reason: str
    steps: int
    question: str


@with_config(_CLOSED)
class TurnFailedData(TypedDict):
    stop_reason: str
    steps: int
    #: ``length`` (the final answer was cut by the output-token limit: retry
    #: with more), ``max_steps``, ``timeout``, ``context_overflow``,
    #: ``provider_error`` or ``error``
    cause: str
    error: str
    #: ``length``: the final answer as far as it was written (not an answer)
    partial_answer: NotRequired[str]


@with_config(_CLOSED)
class TurnCancelledData(TypedDict):
    stop_reason: str
    steps: int
    #: who asked (``turn_cancel``); ``None`` for the system
    by: NotRequired[str | None]
    #: why, when a human rejected (or let expire) an approval
    reason: NotRequired[str]
    #: the tool whose approval was pending
    tool: NotRequired[str]


@with_config(_CLOSED)
class TurnInterruptedData(TypedDict):
    reason: str
    #: the status the turn had (``running``, ``waiting``)
    was: str


TurnResumedData = TypedDict("TurnResumedData", {"from": str, "by": str | None})
TurnResumedData.__pydantic_config__ = _CLOSED  # type: ignore[attr-defined]


#: Every event type and the ``TypedDict`` of its payload.
PAYLOADS: dict[str, type[Any]] = {
    EventType.TURN_QUEUED: TurnQueuedData,
    EventType.TURN_STARTED: TurnStartedData,
    EventType.PHASE: PhaseData,
    EventType.THINKING: ThinkingData,
    EventType.LLM_DELTA: LLMDeltaData,
    EventType.LLM_USAGE: LLMUsageData,
    EventType.TOOL_CALL: ToolCallEventData,
    EventType.TOOL_STARTED: ToolStartedData,
    EventType.TOOL_RESULT: ToolResultEventData,
    EventType.CHECK: CheckData,
    EventType.APPROVAL_REQUESTED: ApprovalRequestedData,
    EventType.APPROVAL_RESOLVED: ApprovalResolvedData,
    EventType.REVIEW: ReviewData,
    EventType.ATTEMPT_RETRY: AttemptRetryData,
    EventType.TURN_ANSWERED: TurnAnsweredData,
    EventType.TURN_ASKED: TurnAskedData,
    EventType.TURN_FAILED: TurnFailedData,
    EventType.TURN_CANCELLED: TurnCancelledData,
    EventType.TURN_INTERRUPTED: TurnInterruptedData,
    EventType.TURN_RESUMED: TurnResumedData,
    EventType.HISTORY: HistoryData,
}

_REQUIRED: dict[str, frozenset[str]] = {
    str(event_type): frozenset(payload.__required_keys__) for event_type, payload in PAYLOADS.items()
}


def payload_check(event_type: str, data: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the event type and the missing keys when
    ``data`` lacks a required key of ``event_type``'s payload, or when the
    type is not an ``EventType`` value. Extra keys pass (see the module
    docstring)."""
    required = _REQUIRED.get(event_type)
    if required is None:
        raise ValueError(f"unknown event type {event_type!r}; expected one of {sorted(_REQUIRED)}")
    missing = required.difference(data)
    if missing:
        raise ValueError(
            f"{event_type} event payload is missing {', '.join(sorted(missing))} "
            f"(got keys: {', '.join(sorted(map(str, data))) or 'none'})"
        )
