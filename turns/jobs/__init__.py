"""Turn jobs: how a queued turn reaches whatever drives it.

- ``handover``: handing a queued turn (``turns.services.enqueue`` calls it
  after the commit) to Celery or to the inline executor
  (the embedded default), which drives it on a background event loop;
- ``tasks``: the Celery tasks (``turns.tasks.turn_run``,
  ``turns.tasks.turns_sweep`` — registered names older than this package,
  kept: they are in queued messages and beat's schedule);
- ``run``: ``run_turn_job``, shared by the task and the inline executor — the
  policy of the turn's kind, its provider and tools, then the driver;
- ``ids``: local job ids, so a dead driver can be told (pure);
- ``sweep``: interrupting turns whose driver is gone, re-queuing lost ones.
"""
