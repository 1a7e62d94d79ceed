"""The turns tests' fixtures (stream settings, the process pools closed
after each test), and this process's cached list of evaluators forgotten."""

from __future__ import annotations

import pytest

from tests.turns.conftest import _close_process_pools, stream_settings  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def _fresh_evaluators_cache():
    from monitoring.dispatch import evaluators_cache_clear

    evaluators_cache_clear()
    yield
    evaluators_cache_clear()
