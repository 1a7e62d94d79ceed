"""The ``judge`` scorer: a grading model reads the question, the gold
answer(s), the prediction and a rubric, and returns a grade with an
explanation (docs/architecture.md#evaluation-semantics). No Django here; the caller caches and records.

The grade is JSON, decoded under :data:`JUDGE_SCHEMA` where the provider
supports constrained decoding (the local model), as the reviewer's verdict is
(``agentlab.agent.review``)::

    {"grade": "correct" | "partial" | "incorrect", "explanation": "..."}

``correct`` scores 1.0, ``partial`` 0.5 — scored, counted in the mean score,
but *not* counted correct in accuracy — and ``incorrect`` 0.0. A judge call
that fails, or a reply without a readable grade, leaves the example
**unscored** with the reason (:meth:`Score.unscored`): a grader's failure is
never the agent's wrong answer. Model grading as in inspect_ai's
``model_graded_qa`` (its ``GRADE: C/P/I`` partial-credit grades) and the
"LLM-as-a-judge" setup of Zheng et al. (2023), "Judging LLM-as-a-Judge with
MT-Bench and Chatbot Arena".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.agent.retry import complete_with_retries
from agentlab.agent.review import json_objects
from agentlab.agent.types import Completion, LLMProvider, ProviderError
from evaluation.scoring.base import Score

#: The scorer's name, as stored on examples, datasets and predictions.
JUDGE = "judge"

#: Grade → score value. ``partial`` is scored (0.5) but not correct.
GRADE_VALUES: dict[str, float] = {"correct": 1.0, "partial": 0.5, "incorrect": 0.0}

DEFAULT_RUBRIC = (
    "The answer is correct when it gives the same fact as one of the gold answers, even in other "
    "words, another form or with extra detail that does not contradict it. It is partial when it "
    "holds part of the gold answer or is right but vague. It is incorrect when it contradicts the "
    "gold answer, gives another fact or does not answer."
)

JUDGE_SYSTEM_PROMPT = """You grade an answer to a question against the gold answer(s) and a rubric. \
Do not answer the question yourself; compare.
Reply with ONE JSON object and nothing else:
{"grade": "correct" | "partial" | "incorrect", "explanation": "<one or two sentences>"}"""

#: The reply :data:`JUDGE_SYSTEM_PROMPT` asks for, as a JSON schema ("grade"
#: first: an explanation cut by the token limit still leaves it readable).
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "grade": {"enum": ["correct", "partial", "incorrect"]},
        "explanation": {"type": "string"},
    },
    "required": ["grade", "explanation"],
    "additionalProperties": False,
}

_GRADE_WORDS = {
    "correct": "correct",
    "c": "correct",
    "right": "correct",
    "yes": "correct",
    "true": "correct",
    "1": "correct",
    "1.0": "correct",
    "partial": "partial",
    "p": "partial",
    "partially correct": "partial",
    "partially_correct": "partial",
    "0.5": "partial",
    "incorrect": "incorrect",
    "i": "incorrect",
    "wrong": "incorrect",
    "no": "incorrect",
    "false": "incorrect",
    "0": "incorrect",
    "0.0": "incorrect",
}


@dataclass(frozen=True)
class JudgeRequest:
    """What the judge grades: ``question``, the ``prediction`` text, the
    ``gold`` answer (a string or a list of aliases), the ``rubric`` (``""``:
    :data:`DEFAULT_RUBRIC`) and the judge ``model``'s name."""

    question: str
    prediction: str
    gold: str | Sequence[str]
    rubric: str
    model: str

    @property
    def rubric_text(self) -> str:
        return self.rubric.strip() or DEFAULT_RUBRIC

    def cache_key(self) -> str:
        """SHA-256 hex of (question, prediction, gold, rubric, model): two
        requests with the same five values get the same grade from the cache."""
        gold = self.gold if isinstance(self.gold, str) else list(self.gold)
        payload = json.dumps(
            [self.question, self.prediction, gold, self.rubric_text, self.model],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def judge_messages(request: JudgeRequest) -> list[dict[str, Any]]:
    """The chat messages of one judge call (OpenAI format)."""
    gold = request.gold
    gold_text = gold if isinstance(gold, str) else "\n".join(f"- {g}" for g in gold)
    user = (
        f"Question:\n{request.question}\n\nGold answer(s):\n{gold_text}\n\n"
        f"Answer to grade:\n{request.prediction}\n\nRubric:\n{request.rubric_text}\n\nYour JSON grade:"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _grade_of(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        value = str(float(value))
    if not isinstance(value, str):
        return None
    key = value.strip().lower().rstrip(".!")
    return _GRADE_WORDS.get(key) or _GRADE_WORDS.get(key.replace("-", " ").replace("_", " "))


def parse_grade(text: str | None) -> Score:
    """Read a judge's reply into a :class:`Score` of scorer ``judge``.

    Takes the first JSON object (prose and code fences around it ignored)
    whose ``grade`` is one of ``correct``/``partial``/``incorrect`` (or a
    plain synonym: ``right``, ``wrong``, ``C``/``P``/``I``, 1/0.5/0). Value
    1.0 / 0.5 / 0.0; ``correct`` is ``True`` only for ``correct``. No
    readable grade → unscored, with the reason and the start of the reply."""
    text = (text or "").strip()
    if not text:
        return Score.unscored(JUDGE, "the judge returned nothing")
    for obj in json_objects(text):
        grade = _grade_of(obj.get("grade"))
        if grade is None:
            continue
        explanation = str(obj.get("explanation") or obj.get("reason") or "").strip()
        return Score(
            value=GRADE_VALUES[grade],
            correct=grade == "correct",
            scorer=JUDGE,
            explanation=f"{grade}: {explanation}" if explanation else grade,
        )
    return Score.unscored(JUDGE, f"no readable grade in the judge's reply: {text[:200]!r}")


def grade_name(score: Score) -> str:
    """``correct``, ``partial``, ``incorrect`` or ``unscored`` for a judge's score."""
    if score.value is None:
        return "unscored"
    return {1.0: "correct", 0.5: "partial"}.get(score.value, "incorrect")


def judge_precheck(request: JudgeRequest) -> Score | None:
    """The score that needs no judge call, or ``None``: a missing gold answer
    is unscored and an empty prediction wrong — the common rule of
    ``evaluation.scoring.score``."""
    gold = request.gold
    aliases = [gold] if isinstance(gold, str) else [str(g) for g in gold]
    if not any(str(g).strip() for g in aliases):
        return Score.unscored(JUDGE, "gold answer is missing")
    if not request.prediction.strip():
        return Score.of(False, JUDGE, "no answer to grade")
    return None


async def judge(
    provider: LLMProvider,
    request: JudgeRequest,
    *,
    max_tokens: int | None = 300,
    retry_attempts: int = 2,
) -> tuple[Score, Completion | None]:
    """Grade one prediction with ``provider``.

    Returns the :class:`Score` and the judge's ``Completion`` (``None`` when no
    call was made: see :func:`judge_precheck`, or the call failed). Its usage
    is the caller's to record, under role ``judge``. A ``ProviderError`` after
    the retries gives an unscored score naming the error, never a raise."""
    early = judge_precheck(request)
    if early is not None:
        return early, None
    return await judge_call(
        provider, judge_messages(request), scorer=JUDGE, max_tokens=max_tokens, retry_attempts=retry_attempts
    )


async def judge_call(
    provider: LLMProvider,
    messages: list[dict[str, Any]],
    *,
    scorer: str,
    max_tokens: int | None,
    retry_attempts: int,
) -> tuple[Score, Completion | None]:
    """One judge call on ``messages`` (greedy, role ``judge``, under
    :data:`JUDGE_SCHEMA` where the provider decodes constrained): its grade as
    ``scorer``'s :class:`Score` and the ``Completion``; a ``ProviderError``
    after ``retry_attempts`` is an unscored score naming it, with ``None``."""
    constrained = bool(getattr(provider, "constrained_decoding", False))
    try:
        completion = await complete_with_retries(
            provider,
            messages,
            None,
            attempts=retry_attempts,
            max_tokens=max_tokens,
            temperature=0.0,
            response_schema=JUDGE_SCHEMA if constrained else None,
            role="judge",
        )
    except ProviderError as exc:
        return Score.unscored(scorer, f"the judge failed: {exc}"), None
    return dataclasses.replace(parse_grade(completion.text), scorer=scorer), completion
