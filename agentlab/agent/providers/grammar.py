"""JSON schema → llama.cpp grammar (GBNF), for schema-constrained decoding.

llama.cpp samples under a GBNF grammar: every token that would leave the
grammar is masked out, so a reply decoded under the grammar of a JSON schema
*is* a JSON value of that schema — invalid output becomes impossible rather
than something to parse around. llama-cpp-python converts a schema with
``LlamaGrammar.from_json_schema`` (its port of llama.cpp's
``json_schema_to_grammar``); ``schema_grammar`` prepares a schema for that
converter and caches the result per schema:

- a node that says nothing about its type (pydantic's ``Any``, e.g.
  ``final_answer``'s ``answer``) becomes a string — the converter refuses
  such a node, and the loop stores these values as text anyway;
- ``description``, ``title``, ``default`` and ``examples`` are dropped (the
  converter ignores them; the model reads them in the prompt instead);
- a JSON string may not hold a raw control character (RFC 8259 §7), so the
  converter's ``char`` rule is narrowed to exclude them when it is the
  known permissive one.

``GrammarUnavailable`` means the schema cannot be expressed as a grammar:
the provider then decodes freely and says so (``Completion.decoding``).
"""

from __future__ import annotations

import functools
import json
from typing import Any

_DROPPED = frozenset({"description", "title", "default", "examples"})
_TYPED = frozenset({"type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref", "properties", "items"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_VALUES = frozenset({"items", "additionalProperties", "not"})

# llama-cpp-python's rule admits any character but '"' and '\\' in a string,
# raw newlines and NUL included; JSON (and json.loads) does not.
_PERMISSIVE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


class GrammarUnavailable(ValueError):
    """The schema cannot be turned into a grammar (or llama_cpp is missing)."""


def for_grammar(schema: Any) -> Any:
    """A copy of JSON schema ``schema`` that llama-cpp-python's converter
    accepts and that admits the same values for the loop (see module doc)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: for_grammar(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [for_grammar(sub) for sub in value]
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            out[key] = for_grammar(value)
        else:
            out[key] = value
    if not _TYPED & out.keys():
        out["type"] = "string"
    return out


@functools.lru_cache(maxsize=64)
def _grammar_text(schema_json: str) -> str:
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError as exc:  # the local extra is missing
        raise GrammarUnavailable(f"llama_cpp is not installed: {exc}") from exc
    try:
        text = json_schema_to_gbnf(schema_json)
    except Exception as exc:  # the converter asserts and raises on what it cannot express
        raise GrammarUnavailable(f"{type(exc).__name__}: {exc}") from exc
    return str(text).replace(_PERMISSIVE_CHAR, _JSON_CHAR)


def schema_grammar(schema: dict[str, Any]) -> Any:
    """A ``llama_cpp.LlamaGrammar`` that admits exactly the JSON values of
    ``schema`` (prepared by ``for_grammar``). Raises ``GrammarUnavailable``."""
    from llama_cpp.llama_grammar import LlamaGrammar

    text = _grammar_text(json.dumps(for_grammar(schema), sort_keys=False, ensure_ascii=False))
    return LlamaGrammar.from_string(text, verbose=False)
