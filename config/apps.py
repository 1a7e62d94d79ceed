"""The Django project as an app of its own, so that starting Django starts Celery's app.

Task modules (``turns.jobs.tasks``) declare their tasks with ``celery.shared_task``
and import nothing from this package: the tasks bind to whichever Celery app
is current when they are sent or run. ``ready`` creates the project's app
(``config.celery``, configured from the ``CELERY_*`` settings) in every
Django process — the server, management commands, tests — so a task sent
from there goes to the configured broker and queue, not to Celery's
unconfigured default app. The worker (``celery -A config``) imports it
itself. Celery's own recipe does this in the project package's
``__init__.py``; here ``ready`` does it, so that importing a module of
``config`` (``config.deploy`` from the settings) starts nothing.

``DaphneConfig`` installs daphne as ``daphne.apps`` would, without importing
its server at app loading (see the class).
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig, apps
from django.core import checks


class DaphneConfig(AppConfig):
    """daphne as an app: its ``runserver`` command (found in
    ``daphne/management/commands``) replaces Django's and staticfiles'.

    daphne's own ``daphne.apps.DaphneConfig`` imports ``daphne.server`` —
    Twisted, 0.15 s — to install Twisted's asyncio reactor before anything
    imports another; every ``manage.py`` command paid for it (issue 32). The
    server is imported where it serves: ``runserver`` imports it when the
    command is loaded, the ``daphne`` program at its start, each before it
    serves, and nothing else in AgentLab imports Twisted. ``ready`` registers
    daphne's check that it comes before ``django.contrib.staticfiles``.
    """

    name = "daphne"
    verbose_name = "Daphne"

    def ready(self) -> None:
        checks.register(daphne_check, checks.Tags.staticfiles)


def daphne_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """daphne's ``daphne.E001`` (``daphne.checks``): its app must come before
    ``django.contrib.staticfiles``, or staticfiles' ``runserver`` wins."""
    for app in apps.get_app_configs():
        if isinstance(app, DaphneConfig):
            return []
        if app.name == "django.contrib.staticfiles":
            return [
                checks.Error(
                    "Daphne must be listed before django.contrib.staticfiles in INSTALLED_APPS.",
                    id="daphne.E001",
                )
            ]
    return []


class AgentLabConfig(AppConfig):
    """The project's own app: ``ready`` creates the Celery app (see the module docstring)."""

    # The Django wiring's package (config/: cookiecutter-django's name, issue 40);
    # its static files (config/static/agentlab/) keep their URL /static/agentlab/.
    name = "config"
    verbose_name = "AgentLab"

    def ready(self) -> None:
        from django.contrib import admin

        from . import celery  # noqa: F401 - creating the app makes it current for shared tasks

        # The admin's app list beside every page took 300 px, and the run and
        # prediction lists then scrolled their right-hand columns out of sight
        # at 1,400 px; the breadcrumbs and the index page lead everywhere.
        admin.site.enable_nav_sidebar = False
