"""Where the tests find the real datasets of ``shared/datasets`` (see its README).

``AGENTLAB_DATASETS_DIR`` wins; otherwise the ``shared/`` folder laid beside
the checkout (as on developer machines and in CI). A missing file is an error,
not a skip: a suite that silently stops testing on real data is worse than a
red one.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = Path(os.environ.get("AGENTLAB_DATASETS_DIR") or ROOT.parent / "shared" / "datasets")


def dataset_path(name: str) -> Path:
    """The path of a shared dataset file; ``FileNotFoundError`` says where it looked."""
    path = DATASETS / name
    if not path.is_file():
        raise FileNotFoundError(
            f"shared dataset {name} not found in {DATASETS}; lay shared/ beside the checkout "
            "or set AGENTLAB_DATASETS_DIR"
        )
    return path
