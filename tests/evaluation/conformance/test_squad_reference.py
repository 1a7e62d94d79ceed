"""``exact`` and ``f1`` against the SQuAD v1.1 evaluation script.

Reference: ``squad/evaluate-v1.1.py`` — the official SQuAD v1.1 script, as
kept in allenai/bi-att-flow at commit
49004549e9a88b78c359b31481afa7792dbb3f4a — functions ``normalize_answer``,
``f1_score`` and ``exact_match_score``; HotpotQA's ``hotpot_evaluate_v1.py``
uses the same three. Ported below.

Variants are generated from the 52 rows of the shared HotpotQA file.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from evaluation.scoring import score
from tests.evaluation.conformance.cases import Case, disagreements, rows


def squad_normalize(text: str) -> str:
    """``normalize_answer``: lower, drop ``string.punctuation``, drop the
    articles, collapse whitespace — in that order."""
    text = text.lower()
    exclude = set(string.punctuation)
    text = "".join(ch for ch in text if ch not in exclude)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, gold: str) -> float:
    """``f1_score``."""
    prediction_tokens = squad_normalize(prediction).split()
    gold_tokens = squad_normalize(gold).split()
    same = sum((Counter(prediction_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = 1.0 * same / len(prediction_tokens)
    recall = 1.0 * same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def squad_exact(prediction: str, gold: str) -> bool:
    """``exact_match_score``."""
    return squad_normalize(prediction) == squad_normalize(gold)


AGREEING_FORMS = {
    "as given": "{g}",
    "upper case": "{upper}",
    "with an article": "The {g}",
    "full stop": "{g}.",
    "padded": "   {g}  \n",
    "in a sentence": "The answer is {g}.",
    "with a hedge": "{g}, I believe",
    "first word": "{first}",
    "said twice": "{g} {g}",
    "bracketed": "({g})",
    "exclaimed": "{g}!!",
    "unrelated": "I do not know",
    "empty": "",
}
#: (AgentLab (exact, F1), SQuAD (exact, F1)) and why.
CURLY = "curly quotes"
CURLY_REASON = (
    "Unicode punctuation (curly quotes, dashes) is punctuation: SQuAD drops only ASCII "
    "string.punctuation, so a model that types \u201cParis\u201d loses the word"
)


def _cases() -> list[Case]:
    cases = []
    for row in rows("hotpotqa-dev-distractor-52.jsonl"):
        gold = row["answer"]
        values = {"g": gold, "upper": gold.upper(), "first": gold.split()[0]}
        for form, template in AGREEING_FORMS.items():
            cases.append(Case(row["question_id"], form, template.format(**values), gold))
        cases.append(Case(row["question_id"], CURLY, f"\u201c{gold}\u201d", gold))
    return cases


def _ours(case: Case) -> tuple[bool, float]:
    exact = score(prediction=case.prediction, gold=case.gold, scorer="exact")
    f1 = score(prediction=case.prediction, gold=case.gold, scorer="f1")
    assert exact.correct is f1.correct  # f1's correct is exact match
    assert f1.value is not None
    return bool(exact.correct), f1.value


def _reference(case: Case) -> tuple[bool, float]:
    return squad_exact(case.prediction, case.gold), squad_f1(case.prediction, case.gold)


def test_exact_and_f1_agree_with_squad_except_unicode_punctuation() -> None:
    cases = _cases()
    deviations = {CURLY: ((True, 1.0), lambda ref: ref[0] is False and ref[1] < 1.0, CURLY_REASON)}
    broken, per_form = disagreements(cases, ours=_ours, reference=_reference, deviations=deviations)
    assert [(o.case.source, o.case.form, o.case.prediction, o.ours, o.reference) for o in broken] == []
    assert len(cases) == 52 * (len(AGREEING_FORMS) + 1) == 728
    assert per_form[CURLY] == 52
    partial = [c for c in cases if 0 < _reference(c)[1] < 1]
    assert len(partial) >= 52  # partial credit is exercised, not only 0 and 1


def test_f1_is_partial_credit_and_exact_match_is_its_correct() -> None:
    result = score(prediction="the Chief of Protocol of the US", gold="Chief of Protocol", scorer="f1")
    assert (
        result.value == squad_f1("the Chief of Protocol of the US", "Chief of Protocol") == 0.7499999999999999
    )
    assert result.correct is False
    assert score(prediction="Chief of Protocol.", gold="chief of protocol", scorer="f1").value == 1.0
    # aliases: the best F1 over the golds, as SQuAD's metric_max_over_ground_truths
    best = score(prediction="New York City", gold=["Boston", "New York"], scorer="f1")
    assert best.value == squad_f1("New York City", "New York") == 0.8
    assert best.explanation.startswith("no alias of 2 matched; best: ")
