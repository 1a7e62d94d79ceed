"""The sampling seed of the LLM calls made in the current task.

A ``contextvars.ContextVar``: ``with sampling_seeded(seed): …`` gives every
call the providers make inside it (in this asyncio task and the threads
``asyncio.to_thread`` starts from it) the seed ``seed``, and no other task's.
The OpenAI-compatible provider sends it as the request's ``seed``, the
embedded model samples with it, the LLM-call cache keys on it. The user
simulator of a conversation example seeds its calls per (example, epoch) this
way (``evaluation.run.simulator``), so two variants of an experiment meet the
same simulated user as far as their answers allow. ``None``: no seed (the
provider's default sampling).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SEED: ContextVar[int | None] = ContextVar("agentlab_sampling_seed", default=None)


def sampling_seed() -> int | None:
    """The seed of the calls made now (``None``: none set)."""
    return _SEED.get()


@contextmanager
def sampling_seeded(seed: int | None) -> Iterator[None]:
    """Set the sampling seed for the calls made inside the block (module doc)."""
    token = _SEED.set(seed)
    try:
        yield
    finally:
        _SEED.reset(token)
