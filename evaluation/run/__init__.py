"""A run: what ``manage.py run_eval`` does, from the checked options to the
finished run with its metrics.

Modules, in the order a run goes through them:

- ``request``: the command's options, checked, as an ``EvalRequest``;
- ``evaluate``: ``run_eval``'s body — resolve the dataset, start or resume the
  run, plan it, drive its examples, finish it;
- ``lifecycle``: ``run_start`` (with the run's lease), ``run_finish``;
- ``plan``: which examples a (resumed) run still drives, each with a queued
  turn and a pessimistic prediction row;
- ``inprocess``: driving the examples through the shared turn driver with
  bounded concurrency; ``on_workers``: the same on Celery workers
  (``run_eval --celery``);
- ``extensions``: a run's plugins and MCP servers;
- ``record``: scoring a finished turn and completing its prediction row;
- ``progress``: the progress bar or log line; ``exits``: the outage that stops
  a run (exit 75) and the command line that resumes it;
- ``worker``: the Celery task a worker drives examples with (``--celery``);
- ``cancel``: ``manage.py cancel_run``; ``rescoring``: ``manage.py rescore``.
"""
