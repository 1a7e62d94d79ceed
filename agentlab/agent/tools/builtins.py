"""The tools that end a turn (``ask_user``, ``final_answer``) and
``default_registry``, the built-in tools every turn starts from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .calculator import calculator_tool
from .documents import search_documents_tool
from .registry import Tool, ToolContext, ToolRegistry
from .sql import sql_query_tool


class AskUserArgs(BaseModel):
    question: str = Field(description="One clarifying question for the user.")


def _ask_user(args: AskUserArgs, context: ToolContext) -> str:
    return f"Asked the user: {args.question}"


class FinalAnswerArgs(BaseModel):
    answer: Any = Field(description="The short final answer only, e.g. just the number or the option letter.")
    evidence: Any = Field(default="", description="The facts or tool results that support the answer.")
    reasoning: Any = Field(default="", description="A brief explanation of how the answer follows.")


def _final_answer(args: FinalAnswerArgs, context: ToolContext) -> str:
    return "Final answer recorded."


def ask_user_tool() -> Tool:
    """``ask_user``: ``{"question": str}``; ends the turn with a clarifying question."""
    return Tool(
        name="ask_user",
        description="Ask the user one clarifying question when the question cannot be answered as asked. "
        "Ends the turn.",
        parameters=AskUserArgs,
        fn=_ask_user,
        ends_turn="ask",
    )


def final_answer_tool() -> Tool:
    """``final_answer``: ``{"answer", "evidence", "reasoning"}``; ends the turn
    with the answer."""
    return Tool(
        name="final_answer",
        description="Give the final answer and finish. 'answer' must be short: just the number, the option "
        "letter, yes/no or a few words.",
        parameters=FinalAnswerArgs,
        fn=_final_answer,
        ends_turn="final",
    )


def default_registry() -> ToolRegistry:
    """A fresh registry with the built-in tools: ``calculator``,
    ``search_documents``, ``ask_user``, ``final_answer`` (offered in every
    turn) and ``sql_query`` (offered only when the turn's context has a
    ``database_path``; last, so the others keep their places)."""
    return ToolRegistry(
        [calculator_tool(), search_documents_tool(), ask_user_tool(), final_answer_tool(), sql_query_tool()]
    )
