"""Reading numbers out of answers, shared by the numeric and sql_result scorers:
the last number in a text (the "flexible extract" rule), a whole text as a
number, and when two numbers are equal (:func:`is_close`).
"""

from __future__ import annotations

import re
from decimal import Decimal

#: Absolute tolerance of every numeric comparison in the scorers.
ABS_TOL = 1e-6


# A number is: optional sign and currency sign in either order ("-$18", "$-18",
# "€5"), then digits (with optional "," thousands groups) and optional
# decimals, or only decimals (".5"), then optionally "/digits" (a fraction).
# The look-behind keeps "5" in "v5", "x5" or "3.5" from being read as a number of
# its own, and keeps the "-" in "5-3" from being read as a sign.
_NUMBER_BODY = (
    r"(?:(?P<sign>[-+\u2212])[$\u20ac\u00a3]?|[$\u20ac\u00a3]\s?(?P<sign_after>[-+\u2212])?)?"
    r"(?:(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<dec>\.\d+)?|(?P<onlydec>\.\d+))"
    r"(?:\s*/\s*(?P<den>\d+)(?![\d.]))?"
)


_NUMBER_RE = re.compile(r"(?<![\w.])" + _NUMBER_BODY)


_STRICT_NUMBER_RE = re.compile(r"\s*" + _NUMBER_BODY + r"\s*%?\s*")


def _number_from_match(m: re.Match[str]) -> float | None:
    if m.group("onlydec") is not None:
        magnitude = float("0" + m.group("onlydec"))
    else:
        magnitude = float(m.group("int").replace(",", "") + (m.group("dec") or ""))
    if m.group("den") is not None:
        denominator = int(m.group("den"))
        if denominator == 0:
            return None
        magnitude /= denominator
    sign = m.group("sign") or m.group("sign_after")
    return -magnitude if sign in ("-", "\u2212") else magnitude


def extract_last_number(text: str) -> float | None:
    """The last number written in ``text``, as a float; ``None`` if there is none.

    Understood: ``18``, ``-3.5``, ``+2``, ``.5``, ``1,600`` (comma thousands
    groups), ``$18``, ``-$18`` and ``$-18`` (→ -18; also ``€``, ``£``),
    ``18 dollars``, ``50%`` (→ 50), ``26.00``, ``1/2`` (→ 0.5;
    a zero denominator makes the token unreadable and it is skipped). Not
    understood: number words (``"eighteen"``), scientific notation. A number glued
    to a letter before it (``v2``, ``x5``) is ignored; ``5-3`` reads as ``5`` and
    ``3``, not ``-3``. Dates such as ``10/12`` read as fractions — the rule is
    "last number", as in lm-evaluation-harness's GSM8K ``flexible-extract``.
    """
    for m in reversed(list(_NUMBER_RE.finditer(text))):
        value = _number_from_match(m)
        if value is not None:
            return value
    return None


def parse_number(text: str) -> float | None:
    """``text`` as one number (optionally ``$``-prefixed or ``%``-suffixed), else ``None``.

    Strict: the whole string must be the number (``"18"``, ``"1,600"``,
    ``"-3.5"``, ``"$18"``, ``"-$18"``, ``"1/2"``); ``"18 dollars"`` is ``None``. Used for gold
    answers, which must be unambiguous."""
    m = _STRICT_NUMBER_RE.fullmatch(text)
    return _number_from_match(m) if m else None


def decimal_places(value: float) -> int:
    """The digits after the decimal point in the shortest text of ``value``
    (Python's ``repr``, which reads back as the same float): 3 for
    ``31.333``, 0 for ``36.0``, 5 for ``1e-05``."""
    exponent = Decimal(repr(value)).normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def is_close(prediction: float, gold: float) -> bool:
    """Numeric equality as a reader means it.

    Equal within ``abs 1e-6``; otherwise, for a gold that is not a whole
    number, equal when one of the two is the other rounded to its own
    decimal places — at least one place: ``31.333`` and ``31.33`` are
    ``31.333333333333332`` written shorter, ``570.84`` is ``570.8400000001``.
    A whole-number gold gets the absolute tolerance only: ``27001`` is not
    GSM8K's ``27000``, nor ``31`` an average of ``31.3``.

    Why not a relative tolerance (``rel 1e-4``, as before): it accepted
    ``10623.67`` for ``10622.67`` — a different number — where the Spider
    test-suite, comparing exactly, says wrong (found by the conformance
    tests)."""
    difference = abs(prediction - gold)
    if difference <= ABS_TOL:
        return True
    if gold.is_integer():
        return False
    places = min(decimal_places(prediction), decimal_places(gold))
    return places >= 1 and difference <= 0.5 * 10.0**-places * (1 + 1e-9)


def format_number(value: float) -> str:
    """``value`` as an explanation shows it: a whole number without ``.0``
    (below 1e15), anything else as ``repr``."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
