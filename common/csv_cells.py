"""Spreadsheet-safe CSV cells (OWASP "CSV injection", https://owasp.org/www-community/attacks/CSV_Injection).

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return opens as a formula in Excel or LibreOffice (``=HYPERLINK(…)``,
``=cmd|' /C calc'!A0``). :func:`csv_cell_neutralise` prefixes such a text
cell with an apostrophe — the documented convention, which a spreadsheet
shows as text — and :func:`csv_cell_restore` removes exactly that one
apostrophe again, so an exported file imports losslessly. A cell that
already begins with apostrophes followed by one of those characters gets one
more, so the two are inverse on every string: ``restore(neutralise(s)) == s``.
JSON lines are never touched (no program evaluates them).
"""

from __future__ import annotations

import re

__all__ = ["FORMULA_TRIGGERS", "csv_cell_neutralise", "csv_cell_restore"]

#: The characters that make a spreadsheet read a cell as a formula when it begins with one.
FORMULA_TRIGGERS = "=+-@\t\r"

_NEUTRALISE = re.compile(r"'*[=+\-@\t\r]")
_RESTORE = re.compile(r"'+[=+\-@\t\r]")


def csv_cell_neutralise(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet evaluates: ``"'" + text`` when it
    begins (after any apostrophes) with one of :data:`FORMULA_TRIGGERS`,
    otherwise ``text`` unchanged."""
    return "'" + text if _NEUTRALISE.match(text) else text


def csv_cell_restore(cell: str) -> str:
    """The text :func:`csv_cell_neutralise` was given for ``cell``: one leading
    apostrophe removed when apostrophes and then one of
    :data:`FORMULA_TRIGGERS` begin it, otherwise ``cell`` unchanged."""
    return cell[1:] if _RESTORE.match(cell) else cell
