"""An example AgentLab plugin: one tool, one step check, one turn check.

- ``word_count(text)``: a tool the agent may call.
- ``search_found_documents`` (per step): each ``search_documents`` call of the
  step returned at least one document.
- ``evidence_quotes_a_document`` (per answered turn): the final answer's
  evidence quotes a document that ``search_documents`` returned in the turn —
  five words in a row from it, or all of an evidence shorter than that (at
  least two words), compared case-insensitively on words.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentlab.agent.plugins import hookimpl, plugin_tool

__version__ = "0.1.0"

QUOTE_WORDS = 5
_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def count_words(arguments: dict[str, Any], context: Any) -> dict[str, int]:
    return {"words": len(words(arguments["text"]))}


@hookimpl
def agentlab_tools(context):
    return [
        plugin_tool(
            "word_count",
            "Count the words of a text.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            count_words,
        )
    ]


def documents_in(result) -> list[dict[str, str]]:
    """The documents one ``search_documents`` result holds (a JSON list; its
    text when there were no documents to search)."""
    if result.name != "search_documents" or result.is_error:
        return []
    try:
        value = json.loads(result.output)
    except ValueError:
        return []
    return [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []


def retrieved_documents(steps) -> list[dict[str, str]]:
    """The documents ``search_documents`` returned in ``steps``."""
    return [doc for step in steps for result in step.results for doc in documents_in(result)]


@hookimpl
def agentlab_step_checked(step, context):
    searches = [r for r in step.results if r.name == "search_documents"]
    if not searches:
        return None
    empty = [r.call_id for r in searches if not documents_in(r)]
    return {"name": "search_found_documents", "passed": not empty, "detail": {"empty_calls": empty}}


def quoted(evidence: str, documents: list[dict[str, str]]) -> str | None:
    """The first run of words of ``evidence`` found in a document, or ``None``."""
    said = words(evidence)
    size = min(QUOTE_WORDS, len(said))
    if size < 2:
        return None
    texts = [" " + " ".join(words(f"{d.get('title', '')} {d.get('text', '')}")) + " " for d in documents]
    for start in range(len(said) - size + 1):
        run = " " + " ".join(said[start : start + size]) + " "
        if any(run in text for text in texts):
            return run.strip()
    return None


@hookimpl
def agentlab_turn_finished(turn, context):
    if turn.stop_reason != "final":
        return None  # not answered: nothing to judge
    documents = retrieved_documents(turn.steps)
    match = quoted(turn.evidence, documents) if documents else None
    return {
        "name": "evidence_quotes_a_document",
        "passed": match is not None,
        "detail": {"quote": match, "documents_retrieved": len(documents)},
    }
