"""What every phase of one drive reads and nobody changes (docs/architecture.md#the-driver).

``DriveContext`` is made once per drive, when the turn has been claimed, and
handed to each phase (``lease``, ``record``, ``review``, ``finish``) in place
of the keyword arguments each used to take one by one. What *changes* during
a drive (the turn's meta, the current attempt, the timings) stays with the
drive (``drive.TurnDrive``); a phase that changes the meta takes it and
returns the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentlab.agent.tools import ToolContext

if TYPE_CHECKING:
    from agentlab.agent.replay import ReplayScript
    from agentlab.agent.tools import ToolRegistry
    from agentlab.agent.types import LLMProvider
    from common.db import DatabaseThreads
    from turns.driver.extensions import Subject
    from turns.driver.lease import ClaimedTurn
    from turns.driver.policies import TurnPolicy


@dataclass(frozen=True, slots=True)
class DriveContext:
    """One drive of one claimed turn, as its phases see it.

    - ``turn``: the turn as claimed (``ClaimedTurn``: its question, limits,
      options and the meta, timings and attempt number it was claimed with);
    - ``holder``: the job id the turn is held by (``turn.job_id``); every
      write of the drive is guarded by it (``event_append_many(holder=…)``);
    - ``db``: the database threads the drive's ORM calls run on;
    - ``policy``: chat or evaluation (``policies``);
    - ``provider``: the LLM provider of the agent and of the review;
    - ``tools``: the tools offered when no extension replaces them;
    - ``subject``: the example, run and dataset plugins are told of
      (evaluation), ``None`` for chat;
    - ``replay``: a replay's recorded path (``agentlab.agent.replay``): the
      agent loop serves its tool results while the agent follows it; ``None``
      for any turn that is not a replay. It keeps a cursor, so one per drive.
    """

    turn: ClaimedTurn
    db: DatabaseThreads
    policy: TurnPolicy
    provider: LLMProvider
    tools: ToolRegistry
    subject: Subject | None = None
    replay: ReplayScript | None = None

    @property
    def turn_id(self) -> int:
        """The turn's primary key."""
        return self.turn.id

    @property
    def holder(self) -> str:
        """The job id holding the turn (``turn.job_id``, set by the claim)."""
        return self.turn.job_id

    def tool_context(self, *, attempt: int, started_calls: frozenset[str]) -> ToolContext:
        """What the tools of attempt ``attempt`` may read: the turn's context
        (for evaluation, the example's documents) and an idempotency scope of
        its own; ``started_calls`` (ids of tool calls whose ``tool.started``
        is in the log) only for the turn's latest attempt, the one a resume
        continues."""
        turn = self.turn
        return ToolContext(
            documents=list((turn.context or {}).get("documents") or []),
            metadata=dict(turn.context or {}),
            idempotency_scope=f"turn-{turn.id}/attempt-{attempt}",
            started_calls=started_calls if attempt == turn.attempts else frozenset(),
        )
