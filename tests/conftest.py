"""Shared fixtures: an owner, a teammate and an outsider (healthchecks ``hc/test.py``),
and helpers that set data up through services."""

from __future__ import annotations

import pytest


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def teammate(django_user_model):
    return django_user_model.objects.create_user("teammate", password="pw-teammate-123")


@pytest.fixture
def outsider(django_user_model):
    return django_user_model.objects.create_user("outsider", password="pw-outsider-123")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("staff", password="pw-staff-123", is_staff=True)


@pytest.fixture
def db_threads():
    from common.db import DatabaseThreads

    pool = DatabaseThreads(max_workers=4)
    yield pool
    pool.close()


@pytest.fixture(autouse=True)
def _review_off_unless_asked(settings):
    """Review is on by default (``AGENTLAB_REVIEW``), but the scripted
    providers of the tests written before it hold no reviewer replies: tests
    that exercise review turn it on (``settings.AGENTLAB_REVIEW = True`` or a
    policy with ``review=True``)."""
    settings.AGENTLAB_REVIEW = False


@pytest.fixture
def process_hub(monkeypatch):
    """A fresh process-wide MCP hub (``agentlab.agent.mcp.mcp_hub()``) for the
    test, closed after it: its servers never outlive the test."""
    from agentlab.agent.mcp import hub as hub_module

    monkeypatch.setattr(hub_module, "_hub", None)
    yield
    if hub_module._hub is not None:
        hub_module._hub.close()
