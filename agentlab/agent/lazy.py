"""Public names a package resolves on first use (PEP 562's module ``__getattr__``).

Importing a submodule imports its package first: the settings' ``import
agentlab.agent.mcp.config`` ran ``agentlab/agent/__init__.py``, whose
re-exports imported the OpenAI SDK, the tools and the MCP hub — a second of
start-up for every ``manage.py`` command (issue 32). A package that re-exports
through ``lazy_export`` keeps its public names (``from agentlab.agent import
AgentLoop``) and imports a name's module only when the name is first read.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


def lazy_export(package: str, exports: Mapping[str, str], name: str) -> Any:
    """The public ``name`` of ``package``, imported from where ``exports``
    says (``"module"``, or ``"module:attr"`` for a name the package renames)
    and kept on the package, so the next read is a plain attribute. A name
    ``exports`` lacks raises ``AttributeError``, as a missing module
    attribute does."""
    source = exports.get(name)
    if source is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, _, attr = source.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    setattr(sys.modules[package], name, value)
    return value


def exports_of(module: str, *names: str) -> dict[str, str]:
    """``{name: module}`` for each of ``names``: the rows of a package's ``exports``."""
    return dict.fromkeys(names, module)
