"""A seeded random subset of a list, in the list's order: one rule for every
"N at random" in AgentLab (``run_eval --sample``, annotation queues'
``--sample``), so the same N, seed and items always give the same subset."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

__all__ = ["seeded_sample"]


def seeded_sample(items: Sequence[T], n: int, seed: int | None) -> list[T]:
    """``n`` of ``items`` drawn with ``random.Random(seed).sample`` over their
    positions, kept in their order; all of them when ``n`` is at least their
    number. ``seed`` ``None`` draws from the system's randomness."""
    if n >= len(items):
        return list(items)
    chosen = set(random.Random(seed).sample(range(len(items)), n))
    return [item for i, item in enumerate(items) if i in chosen]
