"""The Redis databases the tests use, named in one place.

Tests never share database 0 with whatever else runs on the machine: the
channel layer's tests use ``AGENTLAB_TEST_REDIS_DB`` (default 8) and the Celery
broker's tests the next number. Two checkouts testing at once on one machine
set different numbers (e.g. 2 and 4) so that neither reads the other's
messages. Redis has 16 databases (0–15) unless configured otherwise.
"""

from __future__ import annotations

import os

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
REDIS = (REDIS_HOST, REDIS_PORT)

_base = int(os.environ.get("AGENTLAB_TEST_REDIS_DB", "8"))
if not 0 <= _base <= 14:
    raise ValueError(f"AGENTLAB_TEST_REDIS_DB must be 0–14 (it and the next number are used), not {_base}")

#: the channel layer's database (streaming tests, the end-to-end daphne)
LAYER_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/{_base}"
#: the Celery broker's database (Celery workers started by the tests)
BROKER_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/{_base + 1}"
