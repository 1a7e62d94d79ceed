"""The LLM judge without a gold answer: a grading model reads a chat turn's
question, answer and evidence and grades them by a rubric
(docs/monitoring.md#scorers).

The grade and its parsing are the offline judge's (``evaluation.judge.grader``:
``correct`` 1.0, ``partial`` 0.5, ``incorrect`` 0.0, the same JSON schema);
only the prompt differs — there is nothing to compare with, so the rubric
asks whether the answer answers the question and is supported. This is the
reference-free ("single answer grading") setup of Zheng et al. (2023),
"Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena", section 3.1.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentlab.agent.retry import complete_with_retries
from agentlab.agent.types import Completion, LLMProvider, ProviderError
from agentlab.agent.usage import UsageTotals
from evaluation.judge.grader import JUDGE_SCHEMA, parse_grade
from evaluation.judge.provider import judge_provider
from monitoring.scorers import ScorerResult, unscored, verdict

ONLINE_RUBRIC = (
    "The answer is correct when it answers the question that was asked, is supported by its evidence "
    "and claims nothing the evidence contradicts. It is partial when it answers only part of the "
    "question or is vague. It is incorrect when it answers another question, is unsupported or "
    "contradicted by its evidence, or does not answer."
)

ONLINE_JUDGE_PROMPT = """You grade an assistant's answer to a user's question by a rubric. \
There is no gold answer: judge the answer itself. Do not answer the question yourself.
Reply with ONE JSON object and nothing else:
{"grade": "correct" | "partial" | "incorrect", "explanation": "<one or two sentences>"}"""


def online_judge_messages(
    *, question: str, answer: str, evidence: str, rubric: str, conversation: str = ""
) -> list[dict[str, Any]]:
    """The chat messages of one reference-free judge call (OpenAI format);
    ``rubric`` blank: :data:`ONLINE_RUBRIC`. ``conversation``: the turns
    before the question as text (``agentlab.agent.history.conversation_text``
    of the turn's recorded history), without which a follow-up ("double it")
    cannot be graded."""
    before = f"Earlier in the conversation:\n{conversation}\n\n" if conversation else ""
    user = before + (
        f"Question:\n{question}\n\nAnswer to grade:\n{answer}\n\nIts evidence:\n{evidence or '(none)'}\n\n"
        f"Rubric:\n{rubric.strip() or ONLINE_RUBRIC}\n\nYour JSON grade:"
    )
    return [{"role": "system", "content": ONLINE_JUDGE_PROMPT}, {"role": "user", "content": user}]


async def _grade(
    provider: LLMProvider, messages: list[dict[str, Any]]
) -> tuple[ScorerResult, Completion | None]:
    constrained = bool(getattr(provider, "constrained_decoding", False))
    try:
        completion = await complete_with_retries(
            provider,
            messages,
            None,
            attempts=2,
            max_tokens=300,
            temperature=0.0,
            response_schema=JUDGE_SCHEMA if constrained else None,
            role="judge",
        )
    except ProviderError as exc:
        return unscored("judge", f"the judge failed: {exc}"), None
    finally:
        await provider.aclose()
    score = parse_grade(completion.text)
    passed = None if score.value is None else score.correct
    return ScorerResult("judge", score.value, passed, score.explanation), completion


def judge_turn(
    *, question: str, answer: str, evidence: str, rubric: str, model: str, conversation: str = ""
) -> tuple[ScorerResult, dict[str, Any]]:
    """Grade one turn's ``answer`` (its answer, or the clarifying question it
    asked) with the judge model ``model`` (blank: the configured one, built
    by ``evaluation.judge.provider.judge_provider``). Returns the ``judge``
    result and the call's usage under role ``judge`` (``{}`` when no call
    was made). An empty answer fails without a call; a judge that fails or
    replies without a grade leaves the turn unscored by the judge — never
    the agent's fault. Runs its own event loop: call it from a worker
    thread, never from a running loop. ``conversation``: what the turn was
    given of its conversation, as text (see ``online_judge_messages``)."""
    if not answer.strip():
        return verdict("judge", False, "no answer to grade"), {}
    provider = judge_provider(judge_model=model or None)
    messages = online_judge_messages(
        question=question, answer=answer, evidence=evidence, rubric=rubric, conversation=conversation
    )
    result, completion = asyncio.run(_grade(provider, messages))
    if completion is None:
        return result, {}
    usage = UsageTotals()
    usage.add(completion, role="judge")
    return result, usage.to_dict()
