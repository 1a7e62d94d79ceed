"""Numbers read from the environment with the checks django-environ lacks
(docs/configuration.md): the settings module's ``env_number``."""

from __future__ import annotations

import math
import os
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

Number = TypeVar("Number", int, float)


def env_number(
    name: str, default: Number, *, minimum: Number | None = None, positive: bool = False
) -> Number:
    """The environment variable ``name`` as a number of ``default``'s type
    (``int`` or ``float``), or ``default`` when it is unset. A value that is
    not such a finite number, is below ``minimum`` or, with ``positive``, is
    not above 0 raises ``ImproperlyConfigured`` naming the variable and the
    value, instead of a bare ``ValueError`` from deep in django-environ (or a
    heartbeat of 0 s that spins, a negative timeout that ends every turn)."""
    cast = type(default)
    kind = "an integer" if cast is int else "a number"
    raw = os.environ.get(name)
    if raw is None:
        return default
    # Python's own int()/float(), not django-environ's cast, which drops every
    # character but digits, '.', ',' and '-' first ("1e3" became 13.0,
    # "5 minutes" 5.0)
    try:
        value = cast(raw.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be {kind}, got {raw!r}") from exc
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if positive and value <= 0:
        raise ImproperlyConfigured(f"{name} must be above 0, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {raw!r}")
    return value
