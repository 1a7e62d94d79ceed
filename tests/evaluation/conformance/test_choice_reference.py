"""``choice`` against Inspect AI's ``choice()`` scorer.

Reference: UKGovernmentBEIS/inspect_ai at commit
499e6152e7b8fc8cbd8ac5283536572aa6e4ab17, ``src/inspect_ai/solver/
_multiple_choice.py``, ``parse_answers()`` (single correct answer), which
``src/inspect_ai/scorer/_choice.py``'s ``choice()`` scores: the chosen
letters must equal the target's. Ported below as :func:`inspect_choice`.

Variants are generated from every row of the shared ARC-Challenge and
CommonsenseQA files, with the gold letter and with a wrong one.
"""

from __future__ import annotations

import re

from evaluation.scoring import score
from tests.evaluation.conformance.cases import Case, disagreements, rows

_STRICT = re.compile(r"(?i)^ANSWER\s*:\s*([A-Za-z\d ,]+)\s*(?:$|\n|\.)", re.MULTILINE)
_LENIENT = re.compile(r"(?i)ANSWER\s*:\s*([A-Za-z\d ,]+)(?:[^\w]|\n|$|\.)")


def inspect_choice(completion: str, n_choices: int, target: str) -> bool:
    """Inspect AI's verdict: ``parse_answers(state, multiple_correct=False)``
    then ``choice()``'s comparison with a one-letter target."""
    matches = _STRICT.findall(completion) or _LENIENT.findall(completion)
    if not matches:
        return False
    matched = matches[-1].strip().rstrip(".").upper()
    allowed = {chr(ord("A") + i) for i in range(n_choices)}
    tokens = [token for token in matched.split(",") if token]
    answers = {tokens[0]} if len(tokens) == 1 and tokens[0] in allowed else set()
    return answers == {target}


#: Forms of an answer, each a template over the gold letter (or a wrong one),
#: a wrong letter and the chosen letter's option text.
AGREEING_FORMS = {
    "ANSWER: X": "ANSWER: {x}",
    "answer: x": "answer: {lower}",
    "ANSWER: X.": "ANSWER: {x}.",
    "ANSWER:X": "ANSWER:{x}",
    "ANSWER: X,": "ANSWER: {x},",
    "tab and CRLF": "ANSWER:\t{x}\r\n",
    "indented": "   ANSWER: {x}   ",
    "markdown bold": "**ANSWER: {x}**",
    "answer line then explanation": "ANSWER: {x}\nExplanation: {text}",
    "answer line, blank line, reasoning": "Answer: {x}\n\nReasoning: {text}",
    "self-correction, last line wins": "ANSWER: {other}\nWait, let me check again.\nANSWER: {x}",
    "hedge X, Y": "ANSWER: {x}, {other}",
    "hedge Y, X": "ANSWER: {other}, {x}",
    "hedge X or Y": "ANSWER: {x} or {other}",
    "hedge X and Y": "ANSWER: {x} and {other}",
    "hedge both X and Y": "ANSWER: Both {other} and {x}",
    "bare hedge X, Y": "{x}, {other}",
    "bare hedge Y or X": "{other} or {x}",
    "bare hedge both": "Both {x} and {other}",
    "fullwidth colon": "ANSWER\uff1a{x}",
}
#: Forms where AgentLab reads an answer Inspect's format-bound parser does
#: not: (AgentLab, Inspect) for the gold letter, and the reason.
DEVIATING_FORMS = {
    "bare letter": ("{x}", "the whole final answer is one letter"),
    "bracketed letter": ("({x})", "the whole final answer is one letter"),
    "prose marker": ("The answer is {x}.", "an answer marker in prose"),
    "bracketed after marker": ("ANSWER: ({x})", "a bracketed letter after the marker"),
    "marker, letter, reason": ("I think the answer is {x} because {text}", "a letter with its reason"),
    "letter is correct": ("{x} is correct.", "a letter said to be correct"),
    "ANSWER: X because": ("ANSWER: {x} because {text}", "a letter with its reason"),
    "option text": ("{text}", "the text of the option"),
}
#: A wrong letter whose option text is the gold option's text too.
SHARED_TEXT = "option text identical to the gold's"
SHARED_TEXT_REASON = "two options with one text cannot be told apart by their text: either counts"
DEVIATION_REASON = (
    "Inspect's multiple_choice() prompt demands the line 'ANSWER: $LETTER' and its parser marks any "
    "other form wrong; an AgentLab agent answers through final_answer, whose text is the answer, so "
    "explicit forms that name one option are read"
)


def _cases() -> list[Case]:
    cases = []
    for name in ("arc-challenge-test-100.jsonl", "commonsenseqa-dev-100.jsonl"):
        for row in rows(name):
            choices, gold = row["choices"], row["answer"]
            letters = "ABCDEFGH"[: len(choices)]
            wrong = letters[(letters.index(gold) + 1) % len(letters)]
            for letter, other, kind in ((gold, wrong, "gold"), (wrong, gold, "wrong")):
                values = {
                    "x": letter,
                    "lower": letter.lower(),
                    "other": other,
                    "text": choices[letters.index(letter)],
                }
                extra = (("choices", tuple(choices)),)
                for form, template in AGREEING_FORMS.items():
                    cases.append(Case(row["question_id"], form, template.format(**values), gold, extra))
                for form, (template, _) in DEVIATING_FORMS.items():
                    if (
                        form == "option text"
                        and kind == "wrong"
                        and values["text"] == choices[letters.index(gold)]
                    ):
                        form = SHARED_TEXT
                    else:
                        form = f"{form} ({kind})"
                    cases.append(Case(row["question_id"], form, template.format(**values), gold, extra))
    return cases


def _ours(case: Case) -> bool:
    choices = dict(case.extra)["choices"]
    return bool(score(prediction=case.prediction, gold=case.gold, scorer="choice", choices=choices).correct)


def _reference(case: Case) -> bool:
    return inspect_choice(case.prediction, len(dict(case.extra)["choices"]), case.gold)


def test_choice_agrees_with_inspect_ai_except_the_documented_deviations() -> None:
    cases = _cases()
    deviations = {f"{form} (gold)": (True, False, reason) for form, (_, reason) in DEVIATING_FORMS.items()}
    deviations[SHARED_TEXT] = (True, False, SHARED_TEXT_REASON)
    broken, per_form = disagreements(cases, ours=_ours, reference=_reference, deviations=deviations)
    assert [(o.case.source, o.case.form, o.case.prediction, o.ours, o.reference) for o in broken] == []
    assert len(cases) == 200 * 2 * (len(AGREEING_FORMS) + len(DEVIATING_FORMS)) == 11_200
    assert per_form["hedge X, Y"] == 400
    assert per_form[SHARED_TEXT] == 1  # one CommonsenseQA row


def test_the_defects_the_review_found_now_agree() -> None:
    """Failing before: an answer line followed by more text found no letter,
    and a hedge was scored by the order of its letters."""
    choices = ["a", "b", "c", "d"]
    for prediction, right in [
        ("ANSWER: C\nExplanation: days get shorter", True),
        ("Answer: C\n\nReasoning: days get shorter", True),
        ("C, A", False),
        ("ANSWER: C, A", False),
        ("A or C", False),
        ("A and C", False),
        ("Both A and C", False),
        ("I think the answer is C because days get shorter", True),
        ("C is correct.", True),
    ]:
        result = score(prediction=prediction, gold="C", scorer="choice", choices=choices)
        assert result.correct is right, prediction
