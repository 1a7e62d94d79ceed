"""Scheduled evaluations (issue 17): an ``EvalSchedule`` managed in the admin,
fired by Celery beat (django-celery-beat's ``DatabaseScheduler``), runs the
same ``run_eval`` service as ``manage.py run_eval``, compares the run with the
schedule's previous successful run, and flags a significant regression.

Modules, imports pointing down the list:

- ``firing``: the Celery task beat sends, ``scheduled_eval_run(schedule_id)``,
  and ``scheduled_run`` — load, run, link, compare, flag, alert;
- ``alerts``: the WARNING log line and the e-mail to ``ADMINS``;
- ``capacity``: the guard that keeps a ``celery`` schedule from waiting for
  its own worker slot;
- ``sync``: ``schedule_save`` / ``schedule_delete`` — a schedule and its
  django-celery-beat ``PeriodicTask`` written together;
- ``options``: a schedule's options as a checked ``EvalRequest``, errors
  keyed by the schedule's fields (``schedule_check``).
"""
