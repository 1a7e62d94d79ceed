"""The code stays walkable (issue 12): no application module grows past a size a
reader can hold in their head. Migrations and tests are exempt."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentlab", "common", "apikeys", "turns", "evaluation")
MAX_LINES = 450


def test_no_application_module_is_over_the_size_limit():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert len(sizes) > 50  # the walk found the code
    too_big = {name: lines for name, lines in sizes.items() if lines >= MAX_LINES}
    assert too_big == {}, f"split these modules by responsibility (limit {MAX_LINES} lines): {too_big}"
