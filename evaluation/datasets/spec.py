"""A dataset's examples as plain values: what a JSONL line or the demo dataset
becomes before it is stored (no Django), and how a gold answer is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ExampleSpec:
    """One example as read from a dataset file, before it is stored.

    ``external_id`` is the line's ``question_id``; ``answer`` is the gold answer
    text, or a list of alias texts (any one correct); ``scorer`` is the
    example's own scorer name or ``None`` (then the task type's default
    applies, see :func:`evaluation.scoring.scorer_for`);
    ``context`` is the line's ``context`` object (for SQL examples with
    ``database_file`` it also carries ``database_path``); ``metadata`` holds every
    field not listed above, as parsed. ``plugins`` are the entry-point
    plugins the line switches on for its example (``plugins``: a list of
    names, each installed)."""

    external_id: str
    question: str
    answer: str | list[str]
    task_type: str
    scorer: str | None = None
    choices: list[str] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()


def gold_answer(raw: Any) -> str | list[str]:
    """A line's ``answer`` as stored: a string as it is, a JSON array as a list
    of alias texts (each element a string as it is, else its JSON text), any
    other value as its JSON text."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        return [item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in raw]
    return json.dumps(raw, ensure_ascii=False)


def gold_display(gold: Any) -> str:
    """A stored gold answer as one line of text for people: a string as it is,
    a list of aliases as ``any of: Paris · paris, France`` (so a list is never
    mistaken for a string that looks like one)."""
    if isinstance(gold, list):
        return "any of: " + " · ".join(str(item) for item in gold) if gold else "any of: (no alias)"
    return "" if gold is None else str(gold)


#: The metadata keys of an example's subset (docs/evaluating.md#splits-and-tags):
#: ``split`` a name (``train``, ``dev``, ``test``, ``hard``...), ``tags`` a list of names.
SPLIT_KEY = "split"
TAGS_KEY = "tags"


def example_split(metadata: dict[str, Any] | None) -> str | None:
    """The example's split (``metadata["split"]``), ``None`` when it has none."""
    value = (metadata or {}).get(SPLIT_KEY)
    return value if isinstance(value, str) and value else None


def example_tags(metadata: dict[str, Any] | None) -> frozenset[str]:
    """The example's tags (``metadata["tags"]``), empty when it has none."""
    value = (metadata or {}).get(TAGS_KEY)
    return frozenset(t for t in value if isinstance(t, str)) if isinstance(value, list) else frozenset()


def in_subset(metadata: dict[str, Any] | None, *, split: str | None, tags: Iterable[str] = ()) -> bool:
    """Whether an example belongs to the subset ``run_eval --split S --tag T …``
    asks for: its split is ``split`` (any when ``None``) and it carries every
    one of ``tags`` (all must match)."""
    if split is not None and example_split(metadata) != split:
        return False
    return set(tags) <= example_tags(metadata)
