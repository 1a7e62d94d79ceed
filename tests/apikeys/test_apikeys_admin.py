"""API keys are created in the admin and shown once."""

from __future__ import annotations

import re

import pytest

from apikeys.models import ApiKey
from apikeys.services import apikey_authenticate

pytestmark = pytest.mark.django_db


def test_admin_creates_a_key_shows_it_once_and_stores_only_its_digest(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", password="pw-root-123")
    client.force_login(admin)
    response = client.post("/admin/apikeys/apikey/add/", {"name": "nightly CI", "scope": "read"}, follow=True)
    assert response.status_code == 200
    shown = re.findall(r"al_[0-9a-f]{12}_[A-Za-z0-9_\-]+", response.content.decode())
    assert len(shown) == 1
    key = ApiKey.objects.get()
    assert key.name == "nightly CI" and key.created_by == admin
    assert apikey_authenticate(raw=shown[0]) == key
    page = client.get(f"/admin/apikeys/apikey/{key.pk}/change/").content.decode()
    assert shown[0] not in page and f"al_{key.prefix}_" in page


def test_admin_creates_a_run_scoped_key_and_changes_a_keys_scope(client, django_user_model):
    """Issue 46: the scope is chosen when a key is made and may be changed later (read <-> run)."""
    admin = django_user_model.objects.create_superuser("root", password="pw-root-123")
    client.force_login(admin)
    client.post("/admin/apikeys/apikey/add/", {"name": "starter", "scope": "run"}, follow=True)
    key = ApiKey.objects.get()
    assert key.scope == "run"
    page = client.get(f"/admin/apikeys/apikey/{key.pk}/change/").content.decode()
    assert 'name="scope"' in page
    response = client.post(f"/admin/apikeys/apikey/{key.pk}/change/", {"scope": "read"})
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.scope == "read" and key.name == "starter"
    listing = client.get("/admin/apikeys/apikey/").content.decode()
    assert "read: runs and predictions" in listing
