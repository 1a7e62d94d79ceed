"""Where the tests find the real datasets: ``datasets/`` in the repository.

The subsets of GSM8K, ARC, CommonsenseQA, HotpotQA and Spider live in the
repository (``datasets/README.md`` says how each was drawn, ``datasets/NOTICE``
their licenses), so the suite passes from a plain clone with nothing beside it.
A missing file is an error, not a skip: a suite that silently stops testing on
real data is worse than a red one.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"


def dataset_path(name: str) -> Path:
    """The path of a dataset file under ``datasets/``; ``FileNotFoundError`` says where it looked."""
    path = DATASETS / name
    if not path.is_file():
        raise FileNotFoundError(f"dataset {name} not found in {DATASETS}")
    return path
