"""The Django project as an app of its own, so that starting Django starts Celery's app.

Task modules (``turns.jobs.tasks``) declare their tasks with ``celery.shared_task``
and import nothing from this package: the tasks bind to whichever Celery app
is current when they are sent or run. ``ready`` creates the project's app
(``agentlab.celery``, configured from the ``CELERY_*`` settings) in every
Django process — the server, management commands, tests — so a task sent
from there goes to the configured broker and queue, not to Celery's
unconfigured default app. The worker (``celery -A agentlab``) imports it
itself. Celery's own recipe does this in the project package's
``__init__.py``; here that package also holds the framework-free agent core
(``agentlab.agent``), which must import neither Celery nor Django.
"""

from __future__ import annotations

from django.apps import AppConfig


class AgentLabConfig(AppConfig):
    name = "agentlab"
    verbose_name = "AgentLab"

    def ready(self) -> None:
        from django.contrib import admin

        from . import celery  # noqa: F401 - creating the app makes it current for shared tasks

        # The admin's app list beside every page took 300 px, and the run and
        # prediction lists then scrolled their right-hand columns out of sight
        # at 1,400 px; the breadcrumbs and the index page lead everywhere.
        admin.site.enable_nav_sidebar = False
