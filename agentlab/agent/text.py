"""Text and JSON values every store here can hold (no Django: the agent core's layer).

PostgreSQL text and jsonb cannot hold NUL, and neither database can encode a
lone UTF-16 surrogate as UTF-8 (nor can an HTTP request body or llama.cpp's
tokenizer). One rule makes a value safe, ``json_safe`` (whose string case is
``clean_text``): NUL and lone surrogates become U+FFFD. It is applied where
text enters a store or a request, so the same input gives the same stored
bytes on SQLite and PostgreSQL:

- every event payload and every turn field (``turns.events``), a turn's
  question and context when it is created;
- every prediction field (``evaluation.run.record``);
- every line of a dataset file, before it is validated (``evaluation.datasets.jsonl``);
- every LLM request, the tool outputs and documents in it included
  (``agentlab.agent.retry.complete_with_retries``, the one call path, by
  ``json_body_safe``: the same rule at C speed);
- API and form input (``turns.api``, ``evaluation.api``, ``turns.views``).
"""

from __future__ import annotations

import json
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


class SafeJson(dict[str, Any]):
    """A dict whose values ``json_safe`` has made safe already: a later
    ``json_safe`` of a value holding it returns it as it is instead of
    walking it again — an evaluated example's recorded LLM request was
    walked twice, once when it was recorded and again with its event's
    payload. Otherwise a plain dict (JSON, msgpack and the ORM see one)."""


def json_safe(value: Any) -> Any:
    """Return ``value`` as plain JSON data that both databases can store.

    Strings lose NUL and lone surrogates (see ``clean_text``), dict keys become
    strings, tuples and sets become lists, NaN/±inf become ``None``, objects
    with ``to_dict()`` are converted, and anything else becomes ``str(value)``.
    A ``SafeJson`` is returned as it is (it was made safe already).
    """
    if value is None or isinstance(value, bool | int):
        return value
    if type(value) is SafeJson:
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


def json_body_safe(value: Any) -> Any:
    """``value`` as the JSON of a request body carries it, made safe by
    ``json_safe``'s rules — at C speed when nothing needs replacing: the
    JSON text of ``value`` is checked for NUL and lone surrogates and parsed
    back (a copy of plain lists, dicts, strings and numbers); a value JSON
    cannot encode as it is (NaN, a set, an object) or whose text holds such a
    character goes through ``json_safe``. Differs from ``json_safe`` only in
    the keys JSON itself renames (``True`` → ``"true"``, ``None`` →
    ``"null"``), which is what the request would carry anyway. Walking every
    message and tool schema in Python at each LLM call cost a tenth of an
    evaluated example's CPU."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json_safe(value)
    # JSON writes NUL escaped (a literal backslash-u0000 only costs the slow path)
    if "\\u0000" in text or _UNSTORABLE.search(text):
        return json_safe(value)
    return json.loads(text)


def safe_fields(fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """Column values made safe by ``json_safe``: strings and JSON values
    (dicts, lists) are cleaned; numbers, booleans, dates and ``None`` pass
    as they are."""
    return {
        k: json_safe(v) if isinstance(v, str | Mapping | list | tuple) else v
        for k, v in (fields or {}).items()
    }
