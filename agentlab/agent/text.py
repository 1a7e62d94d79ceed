"""Text and JSON values every store here can hold (no Django: the agent core's layer).

PostgreSQL text and jsonb cannot hold NUL, and neither database can encode a
lone UTF-16 surrogate as UTF-8; event payloads, turn fields and API answers
pass through these before they are stored or sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

#: Lone UTF-16 surrogates cannot be encoded as UTF-8 (so neither database can
#: store them) and NUL cannot be stored in PostgreSQL text or jsonb.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Replace characters no database here can store (NUL, lone surrogates) by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def json_safe(value: Any) -> Any:
    """Return ``value`` as plain JSON data that both databases can store.

    Strings lose NUL and lone surrogates (see ``clean_text``), dict keys become
    strings, tuples and sets become lists, NaN/±inf become ``None``, objects
    with ``to_dict()`` are converted, and anything else becomes ``str(value)``.
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return json_safe(to_dict())
    return clean_text(str(value))
