"""A dataset's subsets: its examples' ``split`` and ``tags``
(docs/evaluating.md#splits-and-tags), what ``run_eval --split S --tag T``
runs.

An example carries them in its metadata (``ExampleSpec.metadata``, read from a
JSONL line's ``split`` and ``tags``), so versions, exports and the admin's
editing carry them as they carry the rest of an example's content: a changed
split makes a changed example in the next version.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from common.errors import BadInput
from evaluation.datasets.spec import example_split, example_tags, in_subset
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, Example

__all__ = ["subset_check", "subset_examples", "subset_words"]


def subset_examples(
    examples: Iterable[Example], *, split: str | None, tags: Sequence[str] = ()
) -> list[Example]:
    """The ``examples`` (in their order) of ``split`` carrying every one of
    ``tags`` (``in_subset``); all of them when neither is given."""
    if split is None and not tags:
        return list(examples)
    return [e for e in examples if in_subset(e.metadata, split=split, tags=tags)]


def subset_words(split: str | None, tags: Sequence[str]) -> str:
    """A subset in words for messages and plan lines: ``split dev, tags
    hard + math`` (``""`` for the whole dataset)."""
    words = []
    if split:
        words.append(f"split {split}")
    if tags:
        words.append(("tag " if len(tags) == 1 else "tags ") + " + ".join(tags))
    return ", ".join(words)


def _known(values: Iterable[str]) -> str:
    names = sorted(set(values))
    return ", ".join(names) if names else "none"


def subset_check(dataset: Dataset, version: int, *, split: str | None, tags: Sequence[str] = ()) -> int:
    """How many examples of ``dataset`` at ``version`` the subset holds;
    ``BadInput`` when it holds none — naming the dataset's splits for an
    unknown split, its tags for an unknown tag, or saying that no example
    has them all."""
    if split is None and not tags:
        return examples_at(dataset, version).count()
    metadata: list[dict[str, Any]] = [
        m or {} for m in examples_at(dataset, version).values_list("metadata", flat=True)
    ]
    where = f"dataset {dataset.name}@{version}"
    splits = [s for s in (example_split(m) for m in metadata) if s]
    if split is not None and split not in splits:
        raise BadInput(
            f"--split {split}: {where} has no example in that split (its splits: {_known(splits)})"
        )
    known_tags = {t for m in metadata for t in example_tags(m)}
    unknown = [t for t in tags if t not in known_tags]
    if unknown:
        raise BadInput(
            f"--tag {', '.join(unknown)}: no example of {where} carries it (its tags: {_known(known_tags)})"
        )
    count = sum(1 for m in metadata if in_subset(m, split=split, tags=tags))
    if count == 0:
        raise BadInput(f"{where}: no example is in {subset_words(split, tags)} (all must match)")
    return count
