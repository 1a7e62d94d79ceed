"""The ``choice`` scorer: a multiple-choice option letter; see
:func:`extract_choice` for the rule."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from evaluation.scoring.base import Score
from evaluation.scoring.normalize import normalize_answer

_MARKDOWN_RE = re.compile(r"[*_`]+")
_LETTER_ONLY_RE = re.compile(r"[(\[]?\s*([A-Za-z])\s*[)\]]?\s*[.:)]?")
_BRACKETED_LETTER_RE = re.compile(r"\s*[(\[]\s*([A-Za-z])\s*[)\]]")
_DELIMITED_LETTER_RE = re.compile(r"\s*([A-Za-z])[.:)](?!\w)")
# a letter standing alone: at the end of the text or of its line (an answer
# line followed by an explanation), or before , ; ! ? or a dash or colon
_ALONE = r"(?=\s*$|[ \t]*\r?\n|\s*[,;!?]|\s+[-\u2013\u2014:])"
_BARE_CAPITAL_RE = re.compile(r"\s*([A-Z])" + _ALONE)
_BARE_LETTER_RE = re.compile(r"\s*([A-Za-z])" + _ALONE)
# right after an answer marker, a capital followed by the reason for it
_LETTER_BECAUSE_RE = re.compile(r"\s*([A-Z])\s+(?=(?i:because|since|as|given|for|so)\b)")
# a letter said to be the answer: "C is correct.", "(C) is the right answer"
_LETTER_IS_CORRECT_RE = re.compile(
    r"(?:^|(?<=\s))\s*(?:(?i:option|choice|letter)\s+)?[(\[]?([A-Z])[)\]]?\s+(?i:is)\s+"
    r"(?:(?i:the)\s+)?(?i:correct|right|best|true)\b"
)
# two or more letters offered together: "C, A", "A or C", "Both A and C", "A/C"
_HEDGE_LETTER = r"[(\[]?[A-Z][)\]]?(?![^\W_])"
_HEDGE_JOIN = r"\s*(?:,|/|&|\b(?i:or|and)\b)\s*(?:(?i:or|and)\s+)?"
_HEDGE_LIST = (
    r"(?:(?i:both|either)\s+)?(" + _HEDGE_LETTER + r"(?:" + _HEDGE_JOIN + _HEDGE_LETTER + r")+)\s*[.!]?"
)
_HEDGE_RE = re.compile(r"\s*" + _HEDGE_LIST + r"(?=\s*$|[ \t]*\r?\n)")
_HEDGE_AT_END_RE = re.compile(r"(?:^|(?<=\s))" + _HEDGE_LIST + r"\s*$")
_LONE_CAPITAL_RE = re.compile(r"(?<![^\W\d_])[A-Z](?![^\W\d_])")
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
    at the end of the text or of its line, or before ``, ; ! ? - :``; a letter
    said to be the answer (``C is correct``, ``(B) is the right answer``); or a
    letter followed by the text of that very option (``C Planetary days will
    become shorter``). A capital followed by an ordinary word (``A planet ...``,
    ``I think ...``) is *not* a letter. Right after an answer marker a lone
    letter may be lower case (``answer: c``), and a capital may be followed by
    its reason (``the answer is C because …``)."""
    bare = _BARE_LETTER_RE if after_marker else _BARE_CAPITAL_RE
    patterns = [_BRACKETED_LETTER_RE, _DELIMITED_LETTER_RE, bare, _LETTER_IS_CORRECT_RE]
    if after_marker:
        patterns.append(_LETTER_BECAUSE_RE)
    for pattern in patterns:
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


def _hedge(match: re.Match[str] | None, letters: str) -> bool:
    """Whether a match of the hedge patterns names two or more different valid letters."""
    if match is None:
        return False
    return len(set(_LONE_CAPITAL_RE.findall(match.group(1))) & set(letters)) >= 2


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
       B``, ``ANSWER: C`` on a line followed by an explanation) followed by a
       letter in an explicit form (see rule 3; here a lone lower-case letter
       also counts, ``answer: c``, and so does a capital followed by its
       reason, ``the answer is C because …``).
    3. ``"leading letter"`` — the prediction starts with ``(C)``, ``C.``,
       ``c)``, ``C:``, a capital alone on its line, a letter said to be the
       answer (``C is correct.``), or a letter followed by its own option
       text: ``c) Planetary days``, ``C. Planetary days will become shorter``.
    4. ``"option text"`` — the prediction (after an optional ``The answer is``
       prefix) equals, normalised, the text of an option.
    5. ``"said correct"`` — a letter said to be the answer anywhere
       (``I believe C is correct.``), the last one.
    6. ``"trailing letter"`` — the prediction ends with a capital letter standing
       alone, optionally bracketed and followed by ``.`` or ``!``:
       ``I think it is B.``

    Explicit forms only, so that ``"A planet rotates..."`` (article) or
    ``"I think..."`` (pronoun) is never taken as an option letter.

    A **hedge** — two or more different letters offered together where one
    answer is due (``C, A``, ``ANSWER: C, A``, ``A or C``, ``Both A and C``,
    ``A/C``) — names no single answer and picks nothing (rule ``"hedge"``),
    whichever letter comes first; Inspect AI's ``choice()`` scorer treats it
    the same way.

    A prediction that lists two or more lettered options, one per line
    (``"A. …\nB. …"`` — the model echoing the question), picks nothing unless
    an answer marker (rule 2) says which: otherwise echoing the options would
    score as choosing the first one.
    """
    text = _MARKDOWN_RE.sub("", prediction).strip()
    letters = _valid_letters(choices)
    if not text:
        return [], "empty"
    m = _LETTER_ONLY_RE.fullmatch(text)
    if m:
        letter = m.group(1).upper()
        return ([letter] if letter in letters else []), "letter"
    marked = _after_last_marker(text, letters, choices)
    if marked is not None:
        return ([], "hedge") if marked == _HEDGE else ([marked], "answer marker")
    listed = {m.group(1).upper() for m in _LISTED_OPTION_RE.finditer(text)} & set(letters)
    if len(listed) >= 2:
        return [], "several options listed"
    if _hedge(_HEDGE_RE.match(text), letters) or _hedge(_HEDGE_AT_END_RE.search(text), letters):
        return [], "hedge"
    letter = _letter_at_start(text, letters, choices)
    if letter is not None:
        return [letter], "leading letter"
    by_text = _choice_by_text(text, choices, letters)
    if by_text:
        return by_text, "option text"
    said = [m.group(1) for m in _LETTER_IS_CORRECT_RE.finditer(text) if m.group(1) in letters]
    if said:
        return [said[-1]], "said correct"
    m = _TRAILING_LETTER_RE.search(text)
    if m and m.group(1) in letters:
        return [m.group(1)], "trailing letter"
    return [], "no option letter found"


_HEDGE = "hedge"


def _after_last_marker(text: str, letters: str, choices: Sequence[str] | None) -> str | None:
    """What the last answer marker that is followed by a letter (or by a
    hedge, :data:`_HEDGE`) says; ``None`` when no marker says anything."""
    found: str | None = None
    for marker in _ANSWER_MARKER_RE.finditer(text):
        rest = text[marker.end() :]
        if _hedge(_HEDGE_RE.match(rest), letters):
            found = _HEDGE
            continue
        letter = _letter_at_start(rest, letters, choices, after_marker=True)
        if letter is not None:
            found = letter
    return found


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
