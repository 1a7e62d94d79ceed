"""A system prompt plugin: asks the model to quote its evidence (entry point ``example_prompt``)."""

from __future__ import annotations

from agentlab.agent.plugins import hookimpl

QUOTE_INSTRUCTION = (
    "Search the documents before you answer, and in final_answer's evidence copy, word for word, "
    "the sentence of a document that supports the answer."
)


@hookimpl
def agentlab_system_prompt(example, default):
    return f"{default}\n{QUOTE_INSTRUCTION}"
