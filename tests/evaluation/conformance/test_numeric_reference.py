"""``numeric`` against lm-evaluation-harness's GSM8K scoring.

Reference: EleutherAI/lm-evaluation-harness at commit
4e7e0d47f33bc71070c1d38394bafbb52b117163: ``lm_eval/tasks/gsm8k/gsm8k.yaml``
(the ``flexible-extract`` filter: ``regex`` with ``(-?[$0-9.,]{2,})|(-?[0-9]+)``,
``group_select: -1``, then ``take_first``) in ``lm_eval/filters/extraction.py``
``RegexFilter.apply``, and the ``exact_match`` metric with ``ignore_case``
and ``regexes_to_ignore`` ``[",", "\\$", "(?s).*#### ", "\\.$"]`` in
``lm_eval/api/metrics.py`` ``exact_match_hf_evaluate``. Ported below as
:func:`harness_gsm8k`.

Variants are generated from the 200 rows of the shared GSM8K file, with
the gold number and with a negative gold (the golds are all positive).
"""

from __future__ import annotations

import re

from evaluation.scoring import extract_last_number, parse_number, score
from tests.evaluation.conformance.cases import Case, disagreements, rows

_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORED = [",", "\\$", "(?s).*#### ", "\\.$"]


def _flexible_extract(response: str) -> str:
    found = _FLEXIBLE.findall(response)
    if not found:
        return "[invalid]"
    picked = [group for group in found[-1] if group]
    return picked[0].strip() if picked else "[invalid]"


def _exact_match(prediction: str, reference: str) -> bool:
    for pattern in _IGNORED:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    return prediction.lower() == reference.lower()


def harness_gsm8k(response: str, gold: str) -> bool:
    """lm-evaluation-harness's GSM8K verdict under ``flexible-extract``."""
    return _exact_match(_flexible_extract(response), gold)


def _with_commas(number: str) -> str:
    return f"{int(number):,}"


AGREEING_FORMS = {
    "bare": "{g}",
    "sentence": "The answer is {g}.",
    "GSM8K marker": "#### {g}",
    "dollars": "${g}",
    "dollar word": "{g} dollars",
    "thousands commas": "{commas}",
    "percent": "{g}%",
    "working, then the answer": "First 3 + 4 = 7, then the total is {g}.",
    "answer, then a check": "The total is {g}. Check: 2 + 2 = 4",
    "wrong number": "{wrong}",
    "negated": "-{g}",
    "negated dollars": "-${g}",
    "dollars then sign": "$-{g}",
    "words": "eighteen point five",
}
DEVIATING_FORMS = {
    # (AgentLab, harness) on the positive gold, and why
    "trailing zeros": ("{g}.00", True, False, "26.00 is the number 26; the harness compares strings"),
    "one decimal": ("{g}.0", True, False, "26.0 is the number 26; the harness compares strings"),
    "unicode minus": (
        "\u2212{g}",
        False,
        True,
        "U+2212 MINUS SIGN is a minus sign; the harness's regex drops it and reads a positive number",
    ),
}


def _cases() -> list[Case]:
    cases = []
    for row in rows("gsm8k-test-200.jsonl"):
        gold = row["answer"]
        for sign, gold_text in (("", gold), ("-", f"-{gold}")):
            values = {"g": gold, "commas": _with_commas(gold), "wrong": str(int(gold) + 1)}
            for form, template in AGREEING_FORMS.items():
                cases.append(
                    Case(row["question_id"], f"{form} {sign or '+'}", template.format(**values), gold_text)
                )
            for form, (template, *_rest) in DEVIATING_FORMS.items():
                cases.append(
                    Case(row["question_id"], f"{form} {sign or '+'}", template.format(**values), gold_text)
                )
    return cases


def _ours(case: Case) -> bool:
    return bool(score(prediction=case.prediction, gold=case.gold, scorer="numeric").correct)


def _reference(case: Case) -> bool:
    return harness_gsm8k(case.prediction, case.gold)


def _deviations() -> dict[str, tuple[bool, bool, str]]:
    deviations = {}
    for form, (_, ours, harness, reason) in DEVIATING_FORMS.items():
        deviations[f"{form} +"] = (ours, harness, reason)
    # against a negative gold: "-26.00" is right for AgentLab, a string
    # mismatch for the harness; "−26" is right for AgentLab, wrong there
    deviations["trailing zeros -"] = (False, False, "")
    deviations["one decimal -"] = (False, False, "")
    deviations["unicode minus -"] = (True, False, DEVIATING_FORMS["unicode minus"][3])
    return deviations


def test_numeric_agrees_with_the_harness_except_the_documented_deviations() -> None:
    cases = _cases()
    broken, per_form = disagreements(cases, ours=_ours, reference=_reference, deviations=_deviations())
    assert [
        (o.case.source, o.case.form, o.case.prediction, o.case.gold, o.ours, o.reference) for o in broken
    ] == []
    assert len(cases) == 200 * 2 * (len(AGREEING_FORMS) + len(DEVIATING_FORMS)) == 6_800
    assert per_form["negated dollars -"] == 200


def test_a_minus_before_a_currency_sign_is_kept() -> None:
    """Failing before: ``-$18`` read as 18, and a gold written so was unscored."""
    assert extract_last_number("-$18") == -18
    assert extract_last_number("it lost -$18 today") == -18
    assert parse_number("-$18") == -18
    assert parse_number("$-18") == -18
    assert score(prediction="-$18", gold="18", scorer="numeric").correct is False
    assert score(prediction="-$18", gold="-18", scorer="numeric").correct is True
    assert score(prediction="-18", gold="-$18", scorer="numeric").correct is True
