"""The rule for a dataset's name, shared by every way a dataset is made
(``import_dataset``, ``run_eval FILE``, chat turns added to a new dataset)."""

from __future__ import annotations

import re

from common.errors import BadInput

#: The project's demo dataset's name (``evaluation.datasets.demo``).
DEMO_DATASET_NAME = "demo"

#: ``Dataset.source`` of the demo dataset, the only import allowed under its name.
DEMO_SOURCE = "agentlab demo"

#: The longest name (``Dataset.name``'s column).
MAX_NAME = 200

#: Characters a dataset name may not hold (run ids are made from it; both
#: appear in URLs; ``@`` separates a name from a version; U+FFFD is what
#: bytes that were not UTF-8 — in a URL path, say — were decoded to).
_NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\\?#%@\ufffd]")


def dataset_name_check(name: str, *, source: str = "") -> str:
    """``name`` stripped, if a dataset may have it: not empty, at most
    ``MAX_NAME`` characters, not the demo's (unless ``source`` is the
    demo's), none of control characters, ``/ \\ ? # %``, ``@`` and the
    replacement character U+FFFD (bytes that were not UTF-8).
    Raises ``BadInput`` saying which rule it breaks."""
    name = (name or "").strip()
    if not name:
        raise BadInput("a dataset needs a non-empty name")
    if len(name) > MAX_NAME:
        raise BadInput(f"a dataset name has at most {MAX_NAME} characters")
    if name == DEMO_DATASET_NAME and source != DEMO_SOURCE:
        raise BadInput(
            f"dataset name {name!r} is reserved for the project's demo dataset; choose another name"
        )
    bad = _NAME_FORBIDDEN.search(name)
    if bad and bad.group() == "\ufffd":
        raise BadInput(
            f"dataset name {name!r} contains the replacement character U+FFFD (what bytes that are "
            "not UTF-8 decode to); give the name as UTF-8 text"
        )
    if bad:
        raise BadInput(
            f"dataset name {name!r} contains {bad.group()!r}; control characters and / \\ ? # % "
            "@ are not allowed (NAME@2 names a version)"
        )
    return name
