"""The keys of ``Turn.meta``, defined once, with typed reads and writes (CONTRIBUTING.md#shapes-in-one-place).

``Turn.meta`` is a JSON object (``TurnMeta``):

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

Earlier attempts are ``TurnAttempt`` rows (``turns.attempts``): an archive
moves the failure, the answer's type and a review retry's review out of the
meta into the attempt's row. ``Turn.usage`` is the current attempt's usage;
``turns.attempts.usage_total`` adds the archived attempts'.

Reads take any mapping (a row's ``meta``, or the fields a driver just wrote)
and never raise on a missing key; writes return a new dict and never change
their argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from typing_extensions import TypedDict

from agentlab.agent.text import json_safe
from turns.event_types import ReviewData


class RetryContext(TypedDict):
    previous_answer: str
    instruction: str | None


class CancelRequest(TypedDict):
    #: username, or ``None`` for the system
    by: str | None
    #: ISO-8601
    at: str


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
