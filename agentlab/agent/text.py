"""Text and JSON values every store here can hold (no Django: the agent core's layer).

PostgreSQL text and jsonb cannot hold NUL, and neither database can encode a
lone UTF-16 surrogate as UTF-8 (nor can an HTTP request body or llama.cpp's
tokenizer). One rule makes a value safe, ``json_safe`` (whose string case is
``clean_text``): NUL and lone surrogates become U+FFFD. It is applied where
text enters a store or a request, so the same input gives the same stored
bytes on SQLite and PostgreSQL:

- every event payload and every turn field (``turns.events``), a turn's
  question and context when it is created;
- every prediction field (``evaluation.services.predictions``);
- every line of a dataset file, before it is validated (``evaluation.datasets``);
- every LLM request, the tool outputs and documents in it included
  (``agentlab.agent.retry.complete_with_retries``, the one call path);
- API and form input (``turns.api``, ``evaluation.api``, ``turns.views``).
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


def safe_fields(fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """Column values made safe by ``json_safe``: strings and JSON values
    (dicts, lists) are cleaned; numbers, booleans, dates and ``None`` pass
    as they are."""
    return {
        k: json_safe(v) if isinstance(v, str | Mapping | list | tuple) else v
        for k, v in (fields or {}).items()
    }
