"""``agentlab.settings.env_number``: a numeric setting that is not a number is
ImproperlyConfigured naming the variable and the value (the settings module is
imported once by Django; this calls the helper, it does not reload settings)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentlab.settings import env_number


def test_env_number_reads_the_variable_as_the_default_type(monkeypatch):
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", "7")
    assert env_number("AGENTLAB_TEST_NUMBER", 6) == 7
    assert env_number("AGENTLAB_TEST_NUMBER", 1.5) == 7.0
    monkeypatch.delenv("AGENTLAB_TEST_NUMBER")
    assert env_number("AGENTLAB_TEST_NUMBER", 6) == 6


@pytest.mark.parametrize(("value", "default", "message"), [
    ("abc", 6, "AGENTLAB_TEST_NUMBER must be an integer, got 'abc'"),
    ("1.5", 6, "AGENTLAB_TEST_NUMBER must be an integer, got '1.5'"),
    ("ten", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got 'ten'"),
    ("", 15.0, "AGENTLAB_TEST_NUMBER must be a number, got ''"),
])
def test_env_number_names_the_variable_and_the_bad_value(monkeypatch, value, default, message):
    monkeypatch.setenv("AGENTLAB_TEST_NUMBER", value)
    with pytest.raises(ImproperlyConfigured) as excinfo:
        env_number("AGENTLAB_TEST_NUMBER", default)
    assert str(excinfo.value) == message
