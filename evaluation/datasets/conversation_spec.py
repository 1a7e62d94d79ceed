"""Conversation examples as plain values (docs/evaluating.md#conversation-examples):
a dataset line that is a scripted conversation (``turns``) or a simulated user
(``simulated_user`` with a ``success`` criterion) instead of one question.

No Django here. ``conversation_fields`` checks such a line and returns what the
example row stores: its ``question`` (the first user message, or the simulated
user's goal), its ``answer`` (what is shown as its gold) and the metadata that
carries the conversation (``turns``, or ``simulated_user`` and ``success``), so
versions, exports and the admin carry it like any other metadata. Errors are
``ConversationLineError``: the JSONL reader adds the file and the line.

Shapes stored in the metadata::

    "turns": [{"user": "...", "answer": <gold, optional>, "scorer": <name, optional>}, ...]
    "simulated_user": {"persona": "...", "goal": "...", "max_turns": N, "first_message": "..."?}
    "success": {"rubric": "..."} | {"answer": <gold>}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evaluation.datasets.spec import gold_answer

#: The metadata keys of a conversation example.
TURNS_KEY = "turns"
SIMULATED_KEY = "simulated_user"
SUCCESS_KEY = "success"
#: ``max_turns`` of a simulated user: at least 1, at most this many user messages.
MAX_SIMULATED_TURNS = 50
#: ``max_turns`` when a simulated user names none.
DEFAULT_SIMULATED_TURNS = 10
#: Scorers a turn of a conversation may name: the pure ones (the LLM judge grades
#: a whole simulated conversation — ``success.rubric`` — never one turn).
_TURN_SCORER_HINT = "a pure scorer (exact, f1, numeric, choice, contains, sql_result)"


class ConversationLineError(ValueError):
    """A conversation line that breaks a rule; the message names the field."""


@dataclass(frozen=True)
class ConversationFields:
    """What a conversation line stores on its example row: ``question``,
    ``answer`` (a string or a list of aliases, ``""`` when none) and the
    ``metadata`` keys carrying the conversation."""

    question: str
    answer: str | list[str]
    metadata: dict[str, Any]


def conversation_kind(metadata: Mapping[str, Any] | None) -> str | None:
    """``"turns"`` for a scripted conversation example, ``"simulated"`` for a
    simulated user's, ``None`` for a one-question example."""
    metadata = metadata or {}
    if isinstance(metadata.get(TURNS_KEY), list):
        return "turns"
    if isinstance(metadata.get(SIMULATED_KEY), dict):
        return "simulated"
    return None


def is_conversation_line(record: Mapping[str, Any]) -> bool:
    """Whether a dataset line is a conversation (it gives ``turns`` or ``simulated_user``)."""
    return TURNS_KEY in record or SIMULATED_KEY in record


def conversation_fields(record: Mapping[str, Any], *, pure_scorers: frozenset[str]) -> ConversationFields:
    """Check a conversation line (``is_conversation_line``) and return what
    its example stores. ``pure_scorers``: the names a turn's ``scorer`` may
    take. Raises ``ConversationLineError`` naming the rule broken: both
    ``turns`` and ``simulated_user``; a ``question`` or ``answer`` beside them
    (a conversation's messages and gold answers are its turns'); ``turns``
    not a list of objects, or with no user turn; a turn without ``user``; a
    turn's ``answer`` that is null or ``[]``, or a ``scorer`` that is not
    pure; a simulated user that is not an object, without a ``goal``, with
    ``max_turns`` not an integer in 1..50; a ``success`` that is missing or
    not exactly one of ``rubric`` and ``answer``."""
    if TURNS_KEY in record and SIMULATED_KEY in record:
        raise ConversationLineError("give either 'turns' or 'simulated_user', not both")
    for field in ("question", "answer"):
        if field in record:
            raise ConversationLineError(
                f"a conversation line has no top-level {field!r}: its messages and gold answers "
                "are given per turn ('turns') or by its 'simulated_user' and 'success'"
            )
    if TURNS_KEY in record:
        if SUCCESS_KEY in record:
            raise ConversationLineError("'success' belongs to a 'simulated_user' line, not to 'turns'")
        return _scripted(record[TURNS_KEY], pure_scorers)
    return _simulated(record[SIMULATED_KEY], record.get(SUCCESS_KEY))


def _scripted(raw: Any, pure_scorers: frozenset[str]) -> ConversationFields:
    if not isinstance(raw, list) or not all(isinstance(turn, dict) for turn in raw):
        raise ConversationLineError(
            'field \'turns\' must be a list of objects ({"user": ..., "answer": ...})'
        )
    if not raw:
        raise ConversationLineError("field 'turns' has no user turn: give at least one {\"user\": ...}")
    turns = [_turn(turn, index, pure_scorers) for index, turn in enumerate(raw, start=1)]
    golds = [turn["answer"] for turn in turns if "answer" in turn]
    return ConversationFields(
        question=turns[0]["user"], answer=golds[-1] if golds else "", metadata={TURNS_KEY: turns}
    )


def _turn(raw: dict[str, Any], index: int, pure_scorers: frozenset[str]) -> dict[str, Any]:
    where = f"turns[{index}]"
    unknown = sorted(set(raw) - {"user", "answer", "scorer"})
    if unknown:
        raise ConversationLineError(
            f"{where} has unknown field(s) {', '.join(map(repr, unknown))} (user, answer, scorer)"
        )
    user = raw.get("user")
    if not isinstance(user, str) or not user.strip():
        got = "is missing" if user is None else ("is empty" if isinstance(user, str) else "is not a string")
        raise ConversationLineError(f"{where} has no user message: its 'user' {got}")
    turn: dict[str, Any] = {"user": user}
    if "answer" in raw:
        if raw["answer"] is None or raw["answer"] == []:
            raise ConversationLineError(
                f"{where}: 'answer' is null or an empty list (leave it out for no gold)"
            )
        turn["answer"] = gold_answer(raw["answer"])
    scorer = raw.get("scorer")
    if scorer is not None:
        if not isinstance(scorer, str) or scorer not in pure_scorers:
            raise ConversationLineError(f"{where}: 'scorer' must be {_TURN_SCORER_HINT}, got {scorer!r}")
        turn["scorer"] = scorer
    return turn


def _simulated(raw: Any, success: Any) -> ConversationFields:
    if not isinstance(raw, dict):
        raise ConversationLineError(
            'field \'simulated_user\' must be an object ({"persona", "goal", "max_turns"})'
        )
    unknown = sorted(set(raw) - {"persona", "goal", "max_turns", "first_message"})
    if unknown:
        raise ConversationLineError(
            f"simulated_user has unknown field(s) {', '.join(map(repr, unknown))} "
            "(persona, goal, max_turns, first_message)"
        )
    goal = raw.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise ConversationLineError("simulated_user has no goal: give 'goal' as a non-empty string")
    user: dict[str, Any] = {"persona": _optional_text(raw, "persona"), "goal": goal}
    max_turns = raw.get("max_turns", DEFAULT_SIMULATED_TURNS)
    if (
        not isinstance(max_turns, int)
        or isinstance(max_turns, bool)
        or not 1 <= max_turns <= MAX_SIMULATED_TURNS
    ):
        raise ConversationLineError(
            f"simulated_user 'max_turns' must be an integer from 1 to {MAX_SIMULATED_TURNS}, "
            f"got {max_turns!r}"
        )
    user["max_turns"] = max_turns
    first = _optional_text(raw, "first_message")
    if first:
        user["first_message"] = first
    criterion = _success(success)
    gold = criterion.get("answer", goal)
    return ConversationFields(
        question=first or goal, answer=gold, metadata={SIMULATED_KEY: user, SUCCESS_KEY: criterion}
    )


def _optional_text(raw: dict[str, Any], name: str) -> str:
    value = raw.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConversationLineError(f"simulated_user '{name}' must be a string")
    return value


def _success(raw: Any) -> dict[str, Any]:
    """``success``: ``{"rubric": text}`` (the judge over the conversation) or
    ``{"answer": gold}`` (an answer the agent must state)."""
    if (
        not isinstance(raw, dict)
        or len(set(raw) & {"rubric", "answer"}) != 1
        or set(raw) - {"rubric", "answer"}
    ):
        raise ConversationLineError(
            'a simulated user needs \'success\': {"rubric": "..."} (the judge reads the conversation) '
            'or {"answer": <gold>} (an answer the agent must state)'
        )
    if "rubric" in raw:
        rubric = raw["rubric"]
        if not isinstance(rubric, str) or not rubric.strip():
            raise ConversationLineError("success 'rubric' must be a non-empty string")
        return {"rubric": rubric}
    if raw["answer"] is None or raw["answer"] == [] or raw["answer"] == "":
        raise ConversationLineError("success 'answer' is empty: give the gold answer the agent must state")
    return {"answer": gold_answer(raw["answer"])}
