"""Writes for evaluation (HackSoft "services"), one module per entity.

- ``datasets``: ``dataset_import``, ``dataset_resolve`` (register a JSONL file
  or the demo dataset).
- ``runs``: ``run_start`` (with the run's lease), ``run_finish``, the lease's
  tag, heartbeat and renewing thread (``RunLease``).
- ``plan``: ``run_plan`` — which examples a (resumed) run still drives, each
  with a queued turn and a pessimistic prediction row.
- ``predictions``: ``prediction_record`` / ``prediction_complete`` — score a
  finished turn and complete its prediction row (an answer for the LLM judge
  is left awaiting it).
- ``judging``: the predictions awaiting the LLM judge, its cache, recording
  a grade (``judgement_record``).
- ``rescore``: ``rescore_start`` / ``rescore_copy`` — a new run holding a
  finished run's predictions scored again.

Reads live in ``evaluation.selectors``; ``evaluation.run_eval`` (the body of
``manage.py run_eval``) and ``evaluation.runner`` (driving examples) build on
these. Scoring and metrics are pure functions
(``evaluation.scoring``, ``evaluation.metrics``); these services load rows,
call them and save. Import from the module, e.g.
``from evaluation.services.runs import run_start``.
"""
