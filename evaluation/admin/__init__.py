"""The admin for datasets, examples, runs and predictions (issue 6), and the
run of an evaluation turn in the turn admin.

Read-only like the turn admin (``common.admin.StaffReadOnlyAdmin``): rows are
written by the evaluation services and ``manage.py run_eval``. The path from a
run to what went wrong is made of links: the run page counts its predictions
by error and stop reason and its turns by status, each count a link to the
pre-filtered list; a prediction links to the turn that produced it, whose page
shows the event log.

Counts on list pages are scalar subqueries (one per column, never a join that
multiplies rows), so a list page costs the same number of queries whatever
its length.

The evaluation schedules (``schedules``) are the one editable page: saving
one writes the beat entry that fires it.

Modules: ``datasets`` (datasets and examples), ``runs``, ``predictions``,
``schedules``, ``experiments`` (an experiment's page is its leaderboard),
``turns`` (the turn admin with a run column, field and filter, registered in
place of ``turns.admin.TurnAdmin``), and ``add_to_dataset`` (that admin's
"Add to dataset…" action: chosen turns become examples), ``conversation_examples``
(the conversation list's "Add conversation to dataset…"), ``annotation``
(annotation queues: review one item at a time, judge alignment; issue 30),
and ``replays`` (``manage.py replay_turns``: a replay's turns beside their
originals; issue 42).
"""

from __future__ import annotations

from evaluation.admin.annotation import AnnotationQueueAdmin
from evaluation.admin.conversation_examples import ConversationExamplesAdmin
from evaluation.admin.datasets import DatasetAdmin, ExampleAdmin
from evaluation.admin.experiments import ExperimentAdmin
from evaluation.admin.predictions import PredictionAdmin
from evaluation.admin.replays import ReplayAdmin
from evaluation.admin.runs import RunAdmin
from evaluation.admin.schedules import EvalScheduleAdmin
from evaluation.admin.turns import RunFilter, RunTurnAdmin

__all__ = [
    "AnnotationQueueAdmin",
    "ConversationExamplesAdmin",
    "DatasetAdmin",
    "EvalScheduleAdmin",
    "ExampleAdmin",
    "ExperimentAdmin",
    "PredictionAdmin",
    "ReplayAdmin",
    "RunAdmin",
    "RunFilter",
    "RunTurnAdmin",
]
