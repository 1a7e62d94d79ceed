"""What every scorer returns and takes: :class:`Score` and :class:`ScorerFn`.

"Could not score" (:meth:`Score.unscored`, ``value is None``, ``correct is
None``) is kept apart from "wrong" (``value == 0.0``, ``correct is False``) —
the idea and the name come from inspect_ai's ``scorer/`` package, where an
unscorable sample is not counted as a zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Score:
    """The result of scoring one prediction.

    - ``value``: ``1.0`` correct, ``0.0`` wrong, ``None`` could not score;
      partial credit in between for ``f1`` (the token F1) and the judge's
      ``partial`` (0.5).
    - ``correct``: ``True`` / ``False`` / ``None`` (unscored); ``None``
      exactly when ``value`` is. For ``f1`` it is exact match.
    - ``scorer``: the scorer name (a key of :data:`SCORERS`).
    - ``explanation``: one short human sentence on what was compared.
    """

    value: float | None
    correct: bool | None
    scorer: str
    explanation: str = ""

    @classmethod
    def unscored(cls, scorer: str, explanation: str) -> Score:
        """Could not score (for example the gold answer is missing) — not the same as wrong.

        Mirrors inspect_ai's ``Score`` with an unscored value."""
        return cls(value=None, correct=None, scorer=scorer, explanation=explanation)

    @classmethod
    def of(cls, correct: bool, scorer: str, explanation: str = "") -> Score:
        """A scored result: ``value`` 1.0 when ``correct`` else 0.0."""
        return cls(value=1.0 if correct else 0.0, correct=correct, scorer=scorer, explanation=explanation)

    @property
    def is_scored(self) -> bool:
        return self.correct is not None


class ScorerFn(Protocol):
    """Signature of every entry of :data:`SCORERS`.

    ``prediction`` is a string (``""`` when the model gave none) and ``gold`` is a
    non-blank string — :func:`score` guarantees both."""

    def __call__(
        self,
        prediction: str,
        gold: str,
        *,
        choices: Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Score: ...
