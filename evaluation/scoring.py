"""Scorers: compare one prediction with one gold answer. Pure functions, no Django.

The evaluation service loads a prediction and its example, calls :func:`score`,
and saves the :class:`Score` it gets back (STYLE.md point 5). "Could not score"
(:meth:`Score.unscored`, ``value is None``, ``correct is None``) is kept apart
from "wrong" (``value == 0.0``, ``correct is False``) — the idea and the name come
from inspect_ai's ``scorer/`` package, where an unscorable sample is not counted
as a zero.

Scorers (names are the keys of :data:`SCORERS`; they are stored on examples and
runs, so they are part of the data format and must not be renamed):

``exact``
    Normalised exact match. Normalisation is the one of the SQuAD v1.1 and
    HotpotQA official evaluation scripts (``normalize_answer``): lower case,
    remove punctuation, drop the articles *a*, *an*, *the*, collapse whitespace.
    One widening: punctuation is every character of ``string.punctuation`` (as
    in SQuAD) *and* every Unicode punctuation character (curly quotes, dashes),
    so a model that types a typographic apostrophe is not penalised.
``numeric``
    The **last** number in the prediction (the "flexible extract" rule used for
    GSM8K in lm-evaluation-harness) against the gold number, with tolerance
    ``abs 1e-6`` or ``rel 1e-4`` (:func:`math.isclose`) — only ``abs 1e-6`` when
    the gold is a whole number, so ``27001`` is not ``27000``. See
    :func:`extract_last_number` for what counts as a number.
``choice``
    Multiple-choice option letter; see :func:`extract_choice` for the rule.
``contains``
    The normalised gold occurs in the normalised prediction as whole tokens
    (``"yes"`` is found in ``"yes, it is"`` but not in ``"yesterday"``).
``sql_result``
    Compares the prediction with a SQL query's result rows, cell by cell, with
    numeric tolerance and, unless the example's metadata says ``ordered: true``,
    ignoring row order; see :func:`score_sql_result`. This is the default for
    ``sql`` examples because Spider's answers are result values (``"6"``,
    ``"31.333333333333332"``, JSON lists), not SQL text — the "execution
    accuracy" view of Spider (Yu et al., 2018) applied to the agent's final
    answer.

Common rule, applied by :func:`score` before any scorer runs: a gold answer that
is ``None``, empty or only whitespace means the example cannot be scored
(unscored). Each scorer then checks that the gold is usable for it (``numeric``:
a number; ``choice``: a letter) — if not, unscored — and only then looks at the
prediction; an empty or missing prediction is wrong (``0.0``), never unscored.

An LLM-judge scorer (DESIGN.md §10) needs a provider and is therefore not here.
"""

from __future__ import annotations

import ast
import json
import math
import re
import string
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "DEFAULT_SCORER_BY_TASK_TYPE",
    "SCORERS",
    "Score",
    "extract_choice",
    "extract_last_number",
    "normalize_answer",
    "parse_number",
    "score",
    "score_choice",
    "score_contains",
    "score_exact",
    "score_numeric",
    "score_sql_result",
    "scorer_for",
]

#: Relative and absolute tolerance of every numeric comparison here.
REL_TOL = 1e-4
ABS_TOL = 1e-6


@dataclass(frozen=True)
class Score:
    """The result of scoring one prediction.

    - ``value``: ``1.0`` correct, ``0.0`` wrong, ``None`` could not score.
    - ``correct``: ``True`` / ``False`` / ``None`` (unscored), always consistent
      with ``value``.
    - ``scorer``: the scorer name (a key of :data:`SCORERS`).
    - ``explanation``: one short human sentence on what was compared.
    """

    value: float | None
    correct: bool | None
    scorer: str
    explanation: str = ""

    @classmethod
    def unscored(cls, scorer: str, explanation: str) -> Score:
        """Could not score (for example the gold answer is missing) — not the same as wrong.

        Mirrors inspect_ai's ``Score`` with an unscored value."""
        return cls(value=None, correct=None, scorer=scorer, explanation=explanation)

    @classmethod
    def of(cls, correct: bool, scorer: str, explanation: str = "") -> Score:
        """A scored result: ``value`` 1.0 when ``correct`` else 0.0."""
        return cls(value=1.0 if correct else 0.0, correct=correct, scorer=scorer, explanation=explanation)

    @property
    def is_scored(self) -> bool:
        return self.correct is not None


class ScorerFn(Protocol):
    """Signature of every entry of :data:`SCORERS`.

    ``prediction`` is a string (``""`` when the model gave none) and ``gold`` is a
    non-blank string — :func:`score` guarantees both."""

    def __call__(
        self,
        prediction: str,
        gold: str,
        *,
        choices: Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Score: ...


# --------------------------------------------------------------------------- normalisation

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")


def _is_punctuation(ch: str) -> bool:
    return ch in _PUNCTUATION or unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
    """SQuAD / HotpotQA answer normalisation.

    Lower case, remove punctuation (ASCII ``string.punctuation`` plus Unicode
    punctuation), drop the articles a/an/the, collapse runs of whitespace.
    ``"The  Chief of Protocol."`` → ``"chief of protocol"``;
    ``"3,677 seated"`` → ``"3677 seated"``. Source: ``normalize_answer`` in the
    SQuAD v1.1 evaluation script and HotpotQA's ``hotpot_evaluate_v1.py``
    (same order of steps).
    """
    text = text.lower()
    text = "".join(ch for ch in text if not _is_punctuation(ch))
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


# --------------------------------------------------------------------------- numbers

# A number is: optional sign, then digits (with optional "," thousands groups) and
# optional decimals, or only decimals (".5"), then optionally "/digits" (a fraction).
# The look-behind keeps "5" in "v5", "x5" or "3.5" from being read as a number of
# its own, and keeps the "-" in "5-3" from being read as a sign.
_NUMBER_BODY = (
    r"(?P<sign>[-+\u2212])?"
    r"(?:(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<dec>\.\d+)?|(?P<onlydec>\.\d+))"
    r"(?:\s*/\s*(?P<den>\d+)(?![\d.]))?"
)
_NUMBER_RE = re.compile(r"(?<![\w.])" + _NUMBER_BODY)
_STRICT_NUMBER_RE = re.compile(r"\s*\$?\s*" + _NUMBER_BODY + r"\s*%?\s*")


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
    return -magnitude if m.group("sign") in ("-", "\u2212") else magnitude


def extract_last_number(text: str) -> float | None:
    """The last number written in ``text``, as a float; ``None`` if there is none.

    Understood: ``18``, ``-3.5``, ``+2``, ``.5``, ``1,600`` (comma thousands
    groups), ``$18``, ``18 dollars``, ``50%`` (→ 50), ``26.00``, ``1/2`` (→ 0.5;
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
    ``"-3.5"``, ``"$18"``, ``"1/2"``); ``"18 dollars"`` is ``None``. Used for gold
    answers, which must be unambiguous."""
    m = _STRICT_NUMBER_RE.fullmatch(text)
    return _number_from_match(m) if m else None


def _close(prediction: float, gold: float) -> bool:
    """Tolerant numeric equality: ``abs 1e-6`` or ``rel 1e-4`` (:func:`math.isclose`),
    except that a whole-number gold gets the absolute tolerance only.

    The relative tolerance forgives rounding of golds such as
    ``31.333333333333332``; a whole-number gold has nothing to round, and ``rel
    1e-4`` would accept ``27001`` for GSM8K's ``27000``."""
    if gold.is_integer():
        return abs(prediction - gold) <= ABS_TOL
    return math.isclose(prediction, gold, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _fmt(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


# --------------------------------------------------------------------------- exact / contains / numeric


def score_exact(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Normalised exact match (:func:`normalize_answer` on both sides).

    A gold that normalises to ``""`` (e.g. ``"The."``) is unscored."""
    gold_norm = normalize_answer(gold)
    if not gold_norm:
        return Score.unscored("exact", f"gold {gold!r} is empty after normalisation")
    pred_norm = normalize_answer(prediction)
    if not pred_norm:
        return Score.of(False, "exact", "no prediction")
    ok = pred_norm == gold_norm
    return Score.of(ok, "exact", f"normalised {pred_norm!r} {'==' if ok else '!='} {gold_norm!r}")


def score_contains(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """The normalised gold occurs in the normalised prediction, on token boundaries."""
    gold_norm = normalize_answer(gold)
    if not gold_norm:
        return Score.unscored("contains", f"gold {gold!r} is empty after normalisation")
    pred_norm = normalize_answer(prediction)
    if not pred_norm:
        return Score.of(False, "contains", "no prediction")
    ok = f" {gold_norm} " in f" {pred_norm} "
    return Score.of(ok, "contains", f"{gold_norm!r} {'found' if ok else 'not found'} in the prediction")


def score_numeric(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Last number of the prediction vs. the gold number (tolerance abs 1e-6 or rel 1e-4;
    abs 1e-6 only for a whole-number gold, see :func:`_close`).

    Gold not a number (by :func:`parse_number`) → unscored. No number in the
    prediction → wrong."""
    gold_value = parse_number(gold)
    if gold_value is None:
        return Score.unscored("numeric", f"gold {gold!r} is not a number")
    pred_value = extract_last_number(prediction)
    if pred_value is None:
        return Score.of(False, "numeric", "no number in the prediction")
    ok = _close(pred_value, gold_value)
    return Score.of(
        ok, "numeric", f"last number {_fmt(pred_value)} {'==' if ok else '!='} gold {_fmt(gold_value)}"
    )


# --------------------------------------------------------------------------- choice

_MARKDOWN_RE = re.compile(r"[*_`]+")
_LETTER_ONLY_RE = re.compile(r"[(\[]?\s*([A-Za-z])\s*[)\]]?\s*[.:)]?")
_BRACKETED_LETTER_RE = re.compile(r"\s*[(\[]\s*([A-Za-z])\s*[)\]]")
_DELIMITED_LETTER_RE = re.compile(r"\s*([A-Za-z])[.:)](?!\w)")
_BARE_CAPITAL_RE = re.compile(r"\s*([A-Z])(?=\s*$|\s*[,;!?]|\s+[-\u2013\u2014:])")
_BARE_LETTER_RE = re.compile(r"\s*([A-Za-z])(?=\s*$|\s*[,;!?]|\s+[-\u2013\u2014:])")
_LETTER_THEN_TEXT_RE = re.compile(r"\s*([A-Za-z])\s+(\S.*)", re.DOTALL)
_ANSWER_MARKER_RE = re.compile(
    r"\b(?:answer|option|choice)\b(?:\s+is\b)?\s*[:=\-\u2013\u2014]?\s*(?:(?:option|choice|letter)\b\s*)?",
    re.IGNORECASE,
)
_TRAILING_LETTER_RE = re.compile(r"(?:^|\s)[(\[]?([A-Z])[)\]]?[.!]?\s*$")
_ANSWER_PREFIX_RE = re.compile(
    r"^\s*(?:the\s+)?(?:final\s+|correct\s+|best\s+)?(?:answer|option|choice)\b(?:\s+is\b)?\s*[:=\-]?\s*",
    re.IGNORECASE,
)


_LISTED_OPTION_RE = re.compile(r"^\s*[(\[]?([A-Za-z])[.):\]]\s+\S", re.M)


def _valid_letters(choices: Sequence[str] | None) -> str:
    return string.ascii_uppercase[: len(choices)] if choices else string.ascii_uppercase


def _letter_at_start(
    text: str, letters: str, choices: Sequence[str] | None, *, after_marker: bool = False
) -> str | None:
    """An option letter at the very start of ``text``, by explicit forms only.

    ``(C)`` / ``[C]``; ``C.`` / ``c)`` / ``C:`` (any case, delimiter required, not
    followed by a word character, so ``e.g.`` is not ``E``); a capital letter alone
    at the end or before ``, ; ! ? - :``; or a letter followed by the text of that
    very option (``C Planetary days will become shorter``). A capital followed by
    an ordinary word (``A planet ...``, ``I think ...``) is *not* a letter. Right
    after an answer marker a lone letter may be lower case (``answer: c``)."""
    bare = _BARE_LETTER_RE if after_marker else _BARE_CAPITAL_RE
    for pattern in (_BRACKETED_LETTER_RE, _DELIMITED_LETTER_RE, bare):
        m = pattern.match(text)
        if m:
            letter = m.group(1).upper()
            return letter if letter in letters else None
    m = _LETTER_THEN_TEXT_RE.match(text)
    if m and choices:
        letter = m.group(1).upper()
        if letter in letters:
            option = normalize_answer(choices[letters.index(letter)])
            if option and normalize_answer(m.group(2)).startswith(option):
                return letter
    return None


def _choice_by_text(text: str, choices: Sequence[str] | None, letters: str) -> list[str]:
    if not choices:
        return []
    pred_norm = normalize_answer(_ANSWER_PREFIX_RE.sub("", text))
    if not pred_norm:
        return []
    return [letters[i] for i, option in enumerate(choices) if normalize_answer(option) == pred_norm]


def extract_choice(prediction: str, choices: Sequence[str] | None = None) -> tuple[list[str], str]:
    """The option letter(s) a prediction picks, and the rule that found them.

    Returns ``(letters, rule)``; ``letters`` is ``[]`` when nothing can be
    extracted and has more than one entry only when the prediction is the text
    of several identical options (CommonsenseQA has such rows). Valid letters
    are the first ``len(choices)`` capitals, or ``A`` to ``Z`` without ``choices``.
    Markdown emphasis (``*``, ``_``, backticks) is ignored. Rules, first match wins:

    1. ``"letter"`` — the whole prediction is one letter, any case, optionally
       bracketed and/or followed by ``.``, ``:`` or ``)``: ``C``, ``c``, ``(C)``,
       ``C.``, ``[B]``.
    2. ``"answer marker"`` — the **last** ``answer`` / ``option`` / ``choice``
       keyword (``Answer: C``, ``The answer is (C).``, ``the correct option is
       B``) followed by a letter in an explicit form (see rule 3; here a lone
       lower-case letter also counts: ``answer: c``).
    3. ``"leading letter"`` — the prediction starts with ``(C)``, ``C.``,
       ``c)``, ``C:``, a capital alone, or a letter followed by its own option
       text: ``c) Planetary days``, ``C. Planetary days will become shorter``.
    4. ``"option text"`` — the prediction (after an optional ``The answer is``
       prefix) equals, normalised, the text of an option.
    5. ``"trailing letter"`` — the prediction ends with a capital letter standing
       alone, optionally bracketed and followed by ``.`` or ``!``:
       ``I think it is B.``

    Explicit forms only, so that ``"A planet rotates..."`` (article) or
    ``"I think..."`` (pronoun) is never taken as an option letter.

    A prediction that lists two or more lettered options, one per line
    (``"A. …\nB. …"`` — the model echoing the question), picks nothing unless
    an answer marker (rule 2) says which: otherwise echoing the options would
    score as choosing the first one.
    """
    text = _MARKDOWN_RE.sub("", prediction).strip()
    letters = _valid_letters(choices)
    if not text:
        return [], "empty"
    listed = {m.group(1).upper() for m in _LISTED_OPTION_RE.finditer(text)} & set(letters)
    m = _LETTER_ONLY_RE.fullmatch(text)
    if m:
        letter = m.group(1).upper()
        return ([letter] if letter in letters else []), "letter"
    found: str | None = None
    for marker in _ANSWER_MARKER_RE.finditer(text):
        letter = _letter_at_start(text[marker.end() :], letters, choices, after_marker=True)
        if letter is not None:
            found = letter
    if found is not None:
        return [found], "answer marker"
    if len(listed) >= 2:
        return [], "several options listed"
    letter = _letter_at_start(text, letters, choices)
    if letter is not None:
        return [letter], "leading letter"
    by_text = _choice_by_text(text, choices, letters)
    if by_text:
        return by_text, "option text"
    m = _TRAILING_LETTER_RE.search(text)
    if m and m.group(1) in letters:
        return [m.group(1)], "trailing letter"
    return [], "no option letter found"


def _gold_letter(gold: str, choices: Sequence[str] | None) -> str | None:
    letters = _valid_letters(choices)
    m = _LETTER_ONLY_RE.fullmatch(gold.strip())
    if m:
        letter = m.group(1).upper()
        return letter if letter in letters else None
    by_text = _choice_by_text(gold, choices, letters)
    return by_text[0] if len(by_text) == 1 else None


def score_choice(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Multiple choice: the letter extracted by :func:`extract_choice` vs. the gold letter.

    The gold is a letter (``"C"``; or, with ``choices``, the unique text of an
    option); a gold that is neither, or a letter beyond the number of choices, is
    unscored. Nothing extractable from the prediction → wrong. When the prediction
    is the text of several identical options, it is correct if the gold is one of
    them (the texts cannot be told apart)."""
    gold_letter = _gold_letter(gold, choices)
    if gold_letter is None:
        n = f" of {len(choices)} options" if choices else ""
        return Score.unscored("choice", f"gold {gold!r} is not an option letter{n}")
    picked, rule = extract_choice(prediction, choices)
    if not picked:
        return Score.of(False, "choice", f"no option letter in the prediction ({rule})")
    ok = gold_letter in picked
    shown = "/".join(picked)
    return Score.of(ok, "choice", f"picked {shown} ({rule}), gold {gold_letter}")


# --------------------------------------------------------------------------- sql_result

_CODE_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_MAX_LITERAL_CHARS = 200_000
_NOT_PARSED = object()


def _parse_literal(text: str) -> Any:
    """JSON, else a Python literal (``[('a', 1)]`` as printed by ``sqlite3``), else _NOT_PARSED."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    if len(text) <= _MAX_LITERAL_CHARS:
        try:
            with warnings.catch_warnings():
                # literal_eval compiles the text; odd input such as "1a" warns.
                warnings.simplefilter("ignore", SyntaxWarning)
                return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return _NOT_PARSED


def _parse_structured(text: str) -> Any:
    fenced = _CODE_FENCE_RE.match(text)
    if fenced:
        text = fenced.group(1)
    text = text.strip()
    value = _parse_literal(text)
    if value is _NOT_PARSED:
        start, end = text.find("["), text.rfind("]")
        if 0 <= start < end:
            value = _parse_literal(text[start : end + 1])
    return value


def _is_seq(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _row_views(value: Any) -> list[list[list[Any]]]:
    """The ways a parsed prediction can be read as result rows.

    A list of lists is rows; a flat list is either one column (several rows) or
    one row (several columns); a scalar is one row with one cell."""
    if _is_seq(value):
        if not value:
            return [[]]
        if all(_is_seq(v) for v in value):
            return [[list(v) for v in value]]
        if any(_is_seq(v) or isinstance(v, dict) for v in value):
            return []
        return [[[v] for v in value], [list(value)]]
    if isinstance(value, dict):
        return []
    return [[[value]]]


def _cell_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return parse_number(value)
    return None


def _cells_equal(pred: Any, gold: Any) -> bool:
    """Numbers (or numeric strings) with tolerance; NULL only equals NULL; text
    stripped and case-folded."""
    pred_num, gold_num = _cell_number(pred), _cell_number(gold)
    if pred_num is not None and gold_num is not None:
        return _close(pred_num, gold_num)
    if pred is None or gold is None:
        return pred is None and gold is None
    return str(pred).strip().casefold() == str(gold).strip().casefold()


def _rows_equal(pred_row: Sequence[Any], gold_row: Sequence[Any]) -> bool:
    return len(pred_row) == len(gold_row) and all(
        _cells_equal(p, g) for p, g in zip(pred_row, gold_row, strict=True)
    )


def _results_match(pred_rows: list[list[Any]], gold_rows: list[list[Any]], *, ordered: bool) -> bool:
    if len(pred_rows) != len(gold_rows):
        return False
    if ordered:
        return all(_rows_equal(p, g) for p, g in zip(pred_rows, gold_rows, strict=True))
    # Multiset comparison. Greedy matching is exact when equality is transitive;
    # with a 1e-4 tolerance that only fails for rows differing by about the
    # tolerance itself, which query results do not contain.
    unused = list(pred_rows)
    for gold_row in gold_rows:
        for i, pred_row in enumerate(unused):
            if _rows_equal(pred_row, gold_row):
                del unused[i]
                break
        else:
            return False
    return True


def _gold_rows(gold: str, metadata: dict[str, Any] | None) -> list[list[Any]] | None:
    rows = (metadata or {}).get("result_rows")
    if isinstance(rows, (list, tuple)) and all(_is_seq(r) for r in rows):
        return [list(r) for r in rows]
    try:
        value = json.loads(gold)
    except ValueError:
        return [[gold]]
    views = _row_views(value)
    return views[0] if views else None


def score_sql_result(
    prediction: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """A SQL answer vs. the gold query's result rows ("execution accuracy" on the final answer).

    Gold rows: ``metadata["result_rows"]`` (list of rows, each a list of values)
    when present, else ``gold`` read as in the Spider subset's README: JSON list
    of rows, JSON list of values (one column), or a single value (a JSON scalar,
    or the raw text such as ``"France"``).

    Prediction: JSON, or a Python literal (``[('Love', '2016')]`` as printed by
    ``sqlite3``), optionally in a ```` ``` ```` code fence; failing that, the
    first ``[`` … last ``]`` span; failing that, the raw text as one value. A flat
    list may be one column or one row — either reading counts.

    Comparison: same number of rows and columns (column order matters); cells
    equal when both parse as numbers (``6`` == ``"6"`` == ``6.0``; tolerance abs
    1e-6 / rel 1e-4, so ``31.333`` == ``31.333333333333332``; abs only for a
    whole-number gold cell, so ``52501`` != ``52500``), else as text after
    ``strip()`` and case folding (``"Gonzalo Higuaín "`` == ``"gonzalo higuaín"``).
    Rows are compared in order only when ``metadata["ordered"]`` is ``True``
    (Spider: gold query has ``ORDER BY``); otherwise as a multiset (duplicates
    count). When the gold is a single value and the prediction is free text
    (``"There are 6 singers."``), the numeric rule (last number) applies to a
    numeric gold and normalised exact match to a text gold.
    """
    gold_rows = _gold_rows(gold, metadata)
    if gold_rows is None:
        return Score.unscored("sql_result", f"gold {gold!r} is not a result set")
    if not prediction.strip():
        return Score.of(False, "sql_result", "no prediction")
    ordered = bool((metadata or {}).get("ordered", False))
    parsed = _parse_structured(prediction)
    if parsed is _NOT_PARSED:
        if len(gold_rows) == 1 and len(gold_rows[0]) == 1:
            gold_cell = gold_rows[0][0]
            gold_num = _cell_number(gold_cell)
            if gold_num is not None:
                pred_num = extract_last_number(prediction)
                ok = pred_num is not None and _close(pred_num, gold_num)
                shown = "no number" if pred_num is None else _fmt(pred_num)
                return Score.of(ok, "sql_result", f"single value: {shown} vs gold {_fmt(gold_num)}")
            ok = _cells_equal(prediction, gold_cell) or (
                normalize_answer(prediction) == normalize_answer(str(gold_cell)) != ""
            )
            return Score.of(ok, "sql_result", f"single value {'matches' if ok else 'differs from'} gold")
        return Score.of(
            False, "sql_result", f"prediction is not a list of rows; gold has {len(gold_rows)} rows"
        )
    views = _row_views(parsed)
    ok = any(_results_match(rows, gold_rows, ordered=ordered) for rows in views)
    order = "ordered" if ordered else "unordered"
    return Score.of(
        ok, "sql_result", f"{order} result {'matches' if ok else 'differs from'} gold ({len(gold_rows)} rows)"
    )


# --------------------------------------------------------------------------- registry

#: Scorer name → function. Names are stored on examples and runs; do not rename.
SCORERS: dict[str, ScorerFn] = {
    "exact": score_exact,
    "numeric": score_numeric,
    "choice": score_choice,
    "contains": score_contains,
    "sql_result": score_sql_result,
}

#: Scorer used when an example names none. ``sql`` uses ``sql_result`` (not
#: ``exact``): Spider answers are result values and JSON lists, where numeric
#: tolerance and row order matter. Unlisted task types fall back to ``exact``.
DEFAULT_SCORER_BY_TASK_TYPE: dict[str, str] = {
    "math": "numeric",
    "multiple_choice": "choice",
    "document_qa": "exact",
    "sql": "sql_result",
}

FALLBACK_SCORER = "exact"


def _check_known(name: str) -> str:
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; known scorers: {', '.join(sorted(SCORERS))}")
    return name


def scorer_for(*, example_scorer: str | None, task_type: str) -> str:
    """The scorer name to use for an example.

    The example's own scorer wins; ``None`` or ``""`` means "not set", and then
    :data:`DEFAULT_SCORER_BY_TASK_TYPE` decides, else ``"exact"``.
    Raises ``ValueError`` naming an unknown scorer."""
    if example_scorer:
        return _check_known(example_scorer)
    return _check_known(DEFAULT_SCORER_BY_TASK_TYPE.get(task_type, FALLBACK_SCORER))


def score(
    *,
    prediction: str | None,
    gold: str | None,
    scorer: str,
    choices: Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Score:
    """Score one prediction against one gold answer with the named scorer.

    - ``prediction``: the model's final answer text, ``None`` if it gave none.
    - ``gold``: the example's gold answer text; ``None``/blank → unscored.
    - ``choices``: option texts, used by ``choice``; ``metadata``: the example's
      metadata, used by ``sql_result`` (``result_rows``, ``ordered``).

    Returns a :class:`Score`; never raises for odd predictions. Raises
    ``ValueError`` for an unknown scorer name."""
    fn = SCORERS[_check_known(scorer)]
    if gold is None or not str(gold).strip():
        return Score.unscored(scorer, "gold answer is missing")
    return fn(prediction or "", str(gold), choices=choices, metadata=metadata)
