"""The code version recorded in each run's config snapshot."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@lru_cache(maxsize=1)
def code_version() -> str:
    """``<package version>+g<short commit>`` when the checkout is a git tree
    (``-dirty`` if it has uncommitted changes), else the package version."""
    try:
        base = version("agentlab")
    except PackageNotFoundError:
        base = "0+unknown"
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return base
    return f"{base}+g{commit}" if commit else base
