"""The answer normalisation of the SQuAD v1.1 and HotpotQA evaluation scripts
(``normalize_answer``), shared by the text, choice and SQL-result scorers.
"""

from __future__ import annotations

import re
import string
import unicodedata

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
