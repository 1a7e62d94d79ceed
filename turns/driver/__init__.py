"""The turn driver (docs/architecture.md#the-driver): one driver for chat and evaluation turns.

Its modules are its phases:

- ``drive``: ``drive_turn``, the drive itself, phase by phase (``TurnDrive``);
- ``context``: ``DriveContext``, what every phase of one drive reads
  (the claimed turn, its holder, the database threads, the policy, the
  provider, the tools), made once per drive;
- ``lease``: taking a queued turn by a conditional update (the claim), and
  keeping it while it runs (heartbeats and the cancel flag: the watch);
- ``replay``: rebuilding recorded steps from the event log (resume, continue);
- ``record``: writing each step's events before the next step, the streamed
  text's ``llm.delta`` events, the ``load`` phase while the model loads;
- ``review``: the review phase and the one retry it may ask for;
- ``finish``: mapping a stop reason to the terminal event, what a driven turn
  ended with (``DriveResult``), and the ends written when it cannot finish
  normally (an outage, an unexpected exception);
- ``extensions``: the driver's side of plugins and MCP servers (each
  attempt's set-up and its checks);
- ``policies``: what differs between chat and evaluation (approvals, review wait).
"""

from __future__ import annotations

from turns.driver.context import DriveContext
from turns.driver.drive import drive_turn, shared_default_tools
from turns.driver.finish import DriveResult
from turns.driver.lease import ClaimedTurn, turn_claim
from turns.driver.policies import CHAT, EVALUATION, ChatPolicy, EvaluationPolicy, TurnPolicy

__all__ = [
    "CHAT",
    "EVALUATION",
    "ChatPolicy",
    "ClaimedTurn",
    "DriveContext",
    "DriveResult",
    "EvaluationPolicy",
    "TurnPolicy",
    "drive_turn",
    "shared_default_tools",
    "turn_claim",
]
