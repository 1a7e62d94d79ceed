"""The hooks an AgentLab plugin may implement (pluggy hook specifications).

A plugin is any object — usually a module — with functions marked
``@hookimpl`` whose names are the hooks below; it implements only those it
needs, and may take only some of a hook's arguments (pluggy's rule). A hook
may be ``async def``. Plugins come from the ``agentlab`` entry-point group or
from dotted paths (``agentlab.agent.plugins.manager``). The seed batch runner
the product was first described from took its per-question plugins from a
``plugins_factory``; these hooks are the same idea made declarative.

Every value a plugin returns is checked; a plugin that raises, hangs past its
timeout or returns something unreadable yields a failed check naming it —
never a failed turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

import pluggy

from agentlab.agent.types import Step

PROJECT = "agentlab"
#: The entry-point group plugins are published under.
ENTRY_POINT_GROUP = "agentlab"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Check(TypedDict):
    """One verdict a plugin returns: ``{"name": "cited_a_source", "passed":
    False, "detail": …}``. ``name`` is what metrics group by (keep it stable
    and short); ``detail`` is any JSON value, for a reader of the event log."""

    name: str
    passed: bool
    detail: NotRequired[Any]


@dataclass(frozen=True)
class PluginContext:
    """What a hook may read about the turn it is called for.

    ``kind``: ``"chat"`` or ``"evaluation"``. ``question``: the question of
    the current attempt. ``example``: for an evaluation turn, the example —
    ``{"question_id", "question", "answer", "task_type", "choices",
    "metadata", "context"}`` (it holds the gold answer: a plugin that shows it
    to the model measures nothing); ``None`` in chat. ``documents``: the
    example's context documents (``[{"title", "text"}]``), what
    ``search_documents`` searches. ``metadata``: the turn's context object.
    ``run_id`` / ``dataset``: the evaluation run and dataset names, else
    ``None``.
    """

    kind: Literal["chat", "evaluation"] = "chat"
    question: str = ""
    turn_id: int | None = None
    attempt: int = 1
    example: Mapping[str, Any] | None = None
    documents: Sequence[Mapping[str, Any]] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    dataset: str | None = None


@dataclass(frozen=True)
class TurnSummary:
    """How an attempt ended, for ``agentlab_turn_finished``.

    ``stop_reason``: the loop's (``final``, ``max_steps``, … docs/architecture.md#the-turn-lifecycle).
    ``answer`` / ``evidence`` / ``reasoning``: text (``""`` unless
    answered). ``question``: the clarifying question of an ``asked`` turn.
    ``steps``: every step of the attempt, each a completion with its tool
    results (``agentlab.agent.types.Step``). ``usage``: ``{"input_tokens",
    "output_tokens", "calls", "cost", …}``. ``error``: the cause of a
    failing stop reason.
    """

    stop_reason: str
    answer: str = ""
    evidence: str = ""
    reasoning: str = ""
    question: str | None = None
    steps: Sequence[Step] = ()
    usage: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


class AgentlabHookSpecs:
    """The hook specifications (``PluginManager.add_hookspecs``)."""

    @hookspec
    def agentlab_tools(self, context: PluginContext) -> Any:
        """Extra tools for a turn: a list of ``agentlab.agent.Tool`` (see
        ``agentlab.agent.plugins.plugin_tool``) or of dicts ``{"name",
        "description", "parameters": <JSON schema>, "fn": async (arguments,
        tool_context) -> value, "needs_approval": bool}``. Called once per
        attempt; a name that is taken already is a failed check."""

    @hookspec
    def agentlab_system_prompt(self, example: Mapping[str, Any] | None, default: str) -> Any:
        """The system prompt for a turn (``str``), or ``None`` to leave it.
        ``example`` is as in ``PluginContext`` (``None`` in chat);
        ``default`` is the prompt AgentLab would use. When several plugins
        answer, the last one in the configured order wins."""

    @hookspec
    def agentlab_step_checked(self, step: Step, context: PluginContext) -> Any:
        """Checks about one finished step (its completion and tool results):
        a ``Check``, a list of them, or ``None``. Each is appended to the
        turn's event log as a ``check`` event with ``scope: "step"``."""

    @hookspec
    def agentlab_turn_finished(self, turn: TurnSummary, context: PluginContext) -> Any:
        """Checks about a finished attempt (``TurnSummary``): a ``Check``, a
        list of them, or ``None`` — ``check`` events with ``scope: "turn"``."""

    @hookspec
    def agentlab_scorers(self) -> Any:
        """Named scorers: a mapping ``{name: scorer}``, each ``scorer(example,
        prediction)`` with the built-in scorers' contract. ``example`` is as in
        ``PluginContext`` (gold answer included); ``prediction`` is
        ``{"answer": str | None, "steps": int, "usage": {...}}`` (``answer``
        ``None``: the turn gave none). It returns a verdict ``{"score": float
        in [0, 1] or None, "explanation": str, "correct": bool}`` (``correct``
        optional: ``score == 1``) or an ``evaluation.scoring.Score``;
        ``score: None`` means "could not score", apart from ``0.0``, wrong.
        A name may be given to ``run_eval --scorer``, a dataset's or an
        example's ``scorer`` and ``rescore --scorer``; it must not be a
        built-in scorer's. Called once per process per plugin; a scorer that
        raises or returns something unreadable leaves that prediction
        unscored with the reason (``evaluation.scoring.plugin_scorers``)."""


HOOK_NAMES: tuple[str, ...] = (
    "agentlab_tools",
    "agentlab_system_prompt",
    "agentlab_step_checked",
    "agentlab_turn_finished",
    "agentlab_scorers",
)
