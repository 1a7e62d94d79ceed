"""JSON schema → llama.cpp grammar (``agentlab.agent.providers.grammar``)."""

from __future__ import annotations

import importlib.util

import pytest

from agentlab.agent.providers.grammar import GrammarUnavailable, _grammar_text, for_grammar, schema_grammar

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"
)


def test_untyped_nodes_become_strings_and_prose_keys_are_dropped() -> None:
    schema = {
        "type": "object",
        "title": "FinalAnswerArgs",
        "properties": {
            "answer": {"description": "The short final answer only."},
            "title": {"type": "string", "description": "a property named title stays"},
            "k": {"type": "integer", "default": 3, "minimum": 1},
            "tags": {"type": "array", "items": {}},
            "either": {"anyOf": [{"type": "null"}, {}]},
        },
        "required": ["answer"],
    }
    assert for_grammar(schema) == {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "title": {"type": "string"},
            "k": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string"}},
            "either": {"anyOf": [{"type": "null"}, {"type": "string"}]},
        },
        "required": ["answer"],
    }


@needs_llama
def test_grammar_strings_admit_no_raw_control_characters() -> None:
    text = _grammar_text('{"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}')
    char_rule = next(line for line in text.splitlines() if line.startswith("char ::="))
    assert char_rule.startswith('char ::= [^"\\\\\\x7F\\x00-\\x1F] |')


@needs_llama
def test_a_schema_the_converter_cannot_express_is_grammar_unavailable() -> None:
    with pytest.raises(GrammarUnavailable):
        schema_grammar({"type": "object", "properties": {"x": {"type": "no-such-type"}}, "required": ["x"]})
