"""The keys of ``Turn.meta``, defined once, with typed reads and writes (CONTRIBUTING.md#shapes-in-one-place).

``Turn.meta`` is a JSON object (``TurnMeta``):

- ``attempts``: earlier attempts, oldest first (``ArchivedAttempt``), written
  only by ``attempt_archive`` — for a review retry (the driver),
  ``turn_retry`` and ``turn_continue``;
- ``retry_context``: what a review retry asks the next attempt with
  (``RetryContext``; kept for resumes and continued attempts);
- ``review``: the current attempt's review (the ``review`` event's payload);
- ``cancel``: who asked to cancel, and when (``CancelRequest``);
- ``failure_cause`` / ``failure_error``: why the turn failed (``turn.failed``'s
  ``cause`` and ``error``);
- ``extensions``: the plugins and MCP servers the turn ran with, and the
  plugin whose system prompt it used (``TurnExtensions``, the driver);
- ``answer_type``: the JSON type the current attempt's final answer was given
  in (``turn.answered``'s ``answer_type``), for the scorer's type check;
- ``setup``: what the model was given when the current attempt started — the
  system prompt as sent and the tools offered (``AttemptSetup``, taken by
  the driver when the attempt starts and written with the turn's meta at the
  review phase or the finish: a turn still running does not show it yet).

``Turn.usage`` is the current attempt's usage; ``meta_usage_total`` adds the
archived attempts' — the one sum every view of a turn shows.

Reads take any mapping (a row's ``meta``, or the fields a driver just wrote)
and never raise on a missing key; writes return a new dict and never change
their argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from typing_extensions import TypedDict

from agentlab.agent.text import json_safe
from agentlab.agent.usage import UsageTotals
from turns.event_types import ReviewData

#: Why an attempt was archived: a review asked for a retry, a person retried
#: the turn, or a person gave a ``max_steps`` turn more steps.
AttemptReason = Literal["review", "retry", "continue"]


class RetryContext(TypedDict):
    previous_answer: str
    instruction: str | None


class CancelRequest(TypedDict):
    #: username, or ``None`` for the system
    by: str | None
    #: ISO-8601
    at: str


class ArchivedAttempt(TypedDict, total=False):
    """An earlier attempt of a turn, as ``attempt_archive`` wrote it.

    Always: ``attempt``, ``reason``, ``status``, ``outcome``, ``stop_reason``,
    ``answer``, ``evidence``, ``reasoning``, ``steps``, ``usage``
    (``UsageTotals.to_dict()``), ``finished_at`` (ISO-8601 or ``None``).
    ``reason == "review"`` adds ``question``, ``review`` and ``trace`` (the
    attempt's steps, ``Step.to_dict()``); the others add ``timings`` and the
    failure (``failure_cause``, ``failure_error``, moved out of the meta);
    ``retry`` adds ``clarifying_question``, ``continue`` the ``max_steps``.
    """

    attempt: int
    reason: AttemptReason
    status: str
    outcome: str
    stop_reason: str
    answer: str
    evidence: str
    reasoning: str
    steps: int
    usage: dict[str, Any]
    finished_at: str | None
    question: str
    review: ReviewData | None
    trace: list[dict[str, Any]]
    clarifying_question: str
    max_steps: int
    timings: dict[str, Any]
    failure_cause: str | None
    failure_error: str | None


class TurnExtensions(TypedDict):
    """What a turn ran with beside the built-in agent: plugin names in
    configured order, MCP server names, and the plugin whose system prompt
    won (``None``: the default prompt)."""

    plugins: list[str]
    mcp_servers: list[str]
    system_prompt: str | None


class OfferedTool(TypedDict):
    """A tool offered to the model: its name and the description it was given."""

    name: str
    description: str


class AttemptSetup(TypedDict):
    """What the model was given when attempt ``attempt`` started: the system
    prompt exactly as sent (with the tool list and the JSON-in-text protocol
    for providers without native tool calls: ``native_tools`` false) and the
    tools offered, in order."""

    attempt: int
    system_prompt: str
    tools: list[OfferedTool]
    native_tools: bool


class TurnMeta(TypedDict, total=False):
    attempts: list[ArchivedAttempt]
    retry_context: RetryContext
    review: ReviewData
    cancel: CancelRequest
    failure_cause: str | None
    failure_error: str
    extensions: TurnExtensions
    answer_type: str
    setup: AttemptSetup


def meta_of(raw: Mapping[str, Any] | None) -> TurnMeta:
    """A copy of a stored meta (``None`` or ``{}`` for a turn without one)."""
    return cast(TurnMeta, dict(raw or {}))


# --- reads -------------------------------------------------------------------------


def meta_attempts(meta: Mapping[str, Any] | None) -> list[ArchivedAttempt]:
    """The archived attempts, oldest first (``[]`` if none)."""
    return list((meta or {}).get("attempts") or [])


def meta_review(meta: Mapping[str, Any] | None) -> ReviewData | None:
    """The current attempt's review, if it has one."""
    return (meta or {}).get("review") or None


def meta_retry_context(meta: Mapping[str, Any] | None) -> RetryContext | None:
    """What a review retry asks the current attempt with, if it is one."""
    return (meta or {}).get("retry_context") or None


def meta_cancel_by(meta: Mapping[str, Any] | None) -> str | None:
    """Who asked to cancel the turn (``None``: nobody, or the system)."""
    return ((meta or {}).get("cancel") or {}).get("by")


def meta_failure(meta: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """``(cause, error)`` of a failed turn (each ``None`` when not recorded)."""
    meta = meta or {}
    return meta.get("failure_cause"), meta.get("failure_error")


def meta_answer_type(meta: Mapping[str, Any] | None) -> str | None:
    """The JSON type of the current attempt's final answer, if recorded."""
    return (meta or {}).get("answer_type") or None


def meta_usage_total(meta: Mapping[str, Any] | None, usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """The usage of every attempt of a turn: the current attempt's (the
    turn's ``usage``) plus the archived ones' — a review retry's first attempt
    cost tokens too. ``UsageTotals.to_dict()`` shape, agent and review calls
    apart in ``by_role``. What the chat page sums from the event log, the
    API, the admin and a prediction all show this."""
    archived = [a.get("usage") or {} for a in meta_attempts(meta)]
    if not archived:
        return dict(usage or {})  # as stored: {} before the first call
    total = UsageTotals.from_dict(dict(usage or {}))
    for item in archived:
        total.merge(UsageTotals.from_dict(dict(item)))
    return total.to_dict()


def meta_review_retries(meta: Mapping[str, Any] | None) -> int:
    """How many attempts a review has retried so far."""
    return sum(1 for a in meta_attempts(meta) if a.get("reason") == "review")


def meta_first_attempt_if_review_retried(meta: Mapping[str, Any] | None) -> ArchivedAttempt | None:
    """The turn's first archived attempt when a review retried the turn
    (some archived attempt has ``reason == "review"``), else ``None``."""
    attempts = meta_attempts(meta)
    if not any(a.get("reason") == "review" for a in attempts):
        return None
    return attempts[0]


def meta_last_review(meta: Mapping[str, Any] | None) -> ReviewData | None:
    """A turn's last review: the current attempt's, else the last archived
    attempt's; ``None`` if none has a verdict."""
    reviews = [a.get("review") for a in meta_attempts(meta)] + [meta_review(meta)]
    for review in reversed(reviews):
        if review and review.get("verdict"):
            return review
    return None


def meta_last_review_verdict(meta: Mapping[str, Any] | None) -> str:
    """The verdict of a turn's last review (``meta_last_review``); ``""`` if none."""
    review = meta_last_review(meta)
    return str(review["verdict"]) if review else ""


def meta_extensions(meta: Mapping[str, Any] | None) -> TurnExtensions | None:
    """The plugins and MCP servers the turn ran with (``None``: not recorded,
    a turn without any)."""
    return (meta or {}).get("extensions") or None


def meta_setup(meta: Mapping[str, Any] | None) -> AttemptSetup | None:
    """The system prompt and tools the current attempt started with
    (``None``: not recorded — a turn started before they were)."""
    return (meta or {}).get("setup") or None


# --- writes ------------------------------------------------------------------------


def meta_with_setup(meta: Mapping[str, Any] | None, setup: AttemptSetup) -> TurnMeta:
    """``meta`` with what the current attempt started with (``AttemptSetup``)."""
    new = meta_of(meta)
    new["setup"] = cast(AttemptSetup, json_safe(dict(setup)))
    return new


def meta_with_cancel(meta: Mapping[str, Any] | None, *, by: str | None, at: str) -> TurnMeta:
    """``meta`` with who asked to cancel (``at``: ISO-8601)."""
    new = meta_of(meta)
    new["cancel"] = CancelRequest(by=by, at=at)
    return new


def meta_with_review(meta: Mapping[str, Any] | None, review: ReviewData) -> TurnMeta:
    """``meta`` with the current attempt's review."""
    new = meta_of(meta)
    new["review"] = review
    return new


def meta_with_extensions(
    meta: Mapping[str, Any] | None,
    *,
    plugins: Sequence[str],
    mcp_servers: Sequence[str],
    system_prompt: str | None,
) -> TurnMeta:
    """``meta`` with what the turn ran with (see ``TurnExtensions``)."""
    new = meta_of(meta)
    new["extensions"] = TurnExtensions(
        plugins=list(plugins), mcp_servers=list(mcp_servers), system_prompt=system_prompt
    )
    return new


def meta_with_answer_type(meta: Mapping[str, Any] | None, answer_type: str | None) -> TurnMeta:
    """``meta`` with the JSON type of the final answer (none: removed)."""
    new = meta_of(meta)
    if answer_type:
        new["answer_type"] = answer_type
    else:
        new.pop("answer_type", None)
    return new


def meta_with_failure(meta: Mapping[str, Any] | None, *, cause: str | None, error: str | None) -> TurnMeta:
    """``meta`` with a failed turn's cause (and its error, when there is one)."""
    new = meta_of(meta)
    new["failure_cause"] = cause
    if error:
        new["failure_error"] = error
    return new


def attempt_archive(
    meta: Mapping[str, Any] | None,
    *,
    attempt: int,
    reason: AttemptReason,
    status: str,
    outcome: str,
    stop_reason: str,
    answer: str,
    evidence: str,
    reasoning: str,
    steps: int,
    usage: Mapping[str, Any],
    finished_at: str | None,
    question: str | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    retry_instruction: str | None = None,
    clarifying_question: str | None = None,
    max_steps: int | None = None,
    timings: Mapping[str, Any] | None = None,
) -> tuple[TurnMeta, ArchivedAttempt]:
    """Archive attempt ``attempt`` of a turn: the one place that writes
    ``meta["attempts"]``. Returns ``(new meta, the archived attempt)``.

    ``reason``:

    - ``"review"`` (the driver, after a review asked for a retry): the
      attempt's ``question``, ``trace`` and the meta's ``review`` go into the
      archive; the new meta drops ``review`` and gets ``retry_context`` with
      ``answer`` and ``retry_instruction``, for the next attempt's question;
    - ``"retry"`` (``turn_retry``): ``clarifying_question`` and ``timings`` go
      into the archive with the failure; the next attempt starts afresh, so
      ``retry_context`` and ``review`` are dropped;
    - ``"continue"`` (``turn_continue``): ``max_steps`` and ``timings`` go in
      with the failure; ``retry_context`` stays (the continued attempt was
      asked the same question).

    The failure (``failure_cause``/``failure_error``) always leaves the meta.
    """
    new = meta_of(meta)
    failure_cause = new.pop("failure_cause", None)
    failure_error = new.pop("failure_error", None)
    new.pop("answer_type", None)  # the next attempt answers afresh
    archived = ArchivedAttempt(
        attempt=attempt,
        reason=reason,
        status=status,
        outcome=outcome,
        stop_reason=stop_reason,
        answer=answer,
        evidence=evidence,
        reasoning=reasoning,
        steps=steps,
        usage=dict(usage),
        finished_at=finished_at,
    )
    if reason == "review":
        archived["question"] = question or ""
        archived["review"] = new.pop("review", None)
        archived["trace"] = [dict(step) for step in trace or []]
        new["retry_context"] = RetryContext(previous_answer=answer, instruction=retry_instruction)
    else:
        if reason == "retry":
            archived["clarifying_question"] = clarifying_question or ""
            new.pop("retry_context", None)  # the same question again, afresh
            new.pop("review", None)
        elif max_steps is not None:
            archived["max_steps"] = max_steps
        archived["timings"] = dict(timings or {})
        archived["failure_cause"] = failure_cause
        archived["failure_error"] = failure_error
    archived = cast(ArchivedAttempt, json_safe(archived))
    new["attempts"] = [*meta_attempts(new), archived]
    return new, archived
