"""The turn driver (docs/architecture.md#the-driver): one driver for chat and evaluation turns.

- ``drive``: ``drive_turn``, the drive itself, phase by phase (``TurnDrive``);
- ``result``: what a driven turn ended with, and the ends written when it
  cannot finish normally (an outage, an unexpected exception);
- ``extensions``: the driver's side of plugins and MCP servers;
- ``policies``: what differs between chat and evaluation (approvals, review wait);
- ``claim``: taking a queued turn by a conditional update;
- ``replay``: rebuilding recorded steps from the event log (resume, continue);
- ``recorder``: writing each step's events before the next step;
- ``watch``: heartbeats and the cancel flag;
- ``review_phase``: the review phase and the one retry it may ask for;
- ``finish``: mapping a stop reason to the terminal event.
"""

from __future__ import annotations

from turns.driver.claim import ClaimedTurn, turn_claim
from turns.driver.drive import drive_turn, shared_default_tools
from turns.driver.policies import CHAT, EVALUATION, ChatPolicy, EvaluationPolicy, TurnPolicy
from turns.driver.result import DriveResult

__all__ = [
    "CHAT",
    "EVALUATION",
    "ChatPolicy",
    "ClaimedTurn",
    "DriveResult",
    "EvaluationPolicy",
    "TurnPolicy",
    "drive_turn",
    "shared_default_tools",
    "turn_claim",
]
