"""The admin for conversations, turns and approvals (issue 6).

Staff live here: it is the fastest way to find out what an agent did and to
put a stuck turn back on its feet. Every page is read-only — a turn's status is
written by its driver and by services under a row lock, so a form that saved a
whole stale row would undo their work. The only writes are the actions —
resume, cancel and retry on turns, approve and reject on approvals — and each
one calls the same service as the API (``turns.services``), one row at a
time, reporting per row what happened; the admin history (``LogEntry``)
records who did it.

Access: any active staff user sees everything and may run the actions
(docs/chat-and-api.md#the-http-api, "staff see all"); nobody adds, edits or deletes rows here.

Query budget: list pages run a constant number of queries whatever the number
of rows — related rows come with ``select_related`` and counts, the last
activity of a conversation comes as an annotation. The turn page reads one
page of its event log by seq range (``turns.selectors.events_after``), on the
(turn, seq) unique index, so a turn with 5,000 events costs the same as one
with 50.

Modules: ``conversations`` (conversation list and page, its newest turns
inline), ``turns`` (turn list, filters and actions), ``turn_page`` (the tables
and the event log of one turn's page), ``approvals``, ``display`` (turn status
badge, duration). The shared pieces (formatting, ``StaffReadOnlyAdmin``) are
``common.admin``. An evaluation turn's run (a column, a field, a filter) is
added by ``evaluation.admin.turns``, which registers a subclass of
``TurnAdmin``: this package knows nothing of evaluation.
"""

from __future__ import annotations

from turns.admin.approvals import ApprovalAdmin
from turns.admin.conversations import TURNS_INLINE_LIMIT, ConversationAdmin, TurnInline
from turns.admin.display import status_badge, turn_duration_ms
from turns.admin.turn_page import EVENTS_PER_PAGE
from turns.admin.turns import CONTINUE_EXTRA_STEPS, AttentionFilter, ModelFilter, StopReasonFilter, TurnAdmin

__all__ = [
    "CONTINUE_EXTRA_STEPS",
    "EVENTS_PER_PAGE",
    "TURNS_INLINE_LIMIT",
    "ApprovalAdmin",
    "AttentionFilter",
    "ConversationAdmin",
    "ModelFilter",
    "StopReasonFilter",
    "TurnAdmin",
    "TurnInline",
    "status_badge",
    "turn_duration_ms",
]
