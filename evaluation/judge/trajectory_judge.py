"""The ``trajectory_judge`` scorer: an LLM judge reads the question, every
step of the agent's path (tool, arguments, result) and the answer, and
grades the path by a rubric (default :data:`DEFAULT_TRAJECTORY_RUBRIC`: the
path was necessary, correct and efficient) — agentevals'
``create_trajectory_llm_as_judge`` in AgentLab's judge: the same grades
(``correct`` 1.0, ``partial`` 0.5, ``incorrect`` 0.0), the same retries
(``complete_with_retries``, 2 attempts), the same cache
(``JudgeCacheEntry``, keyed by question, transcript, expected path, rubric
and model) and the same rule that a failed call or an unreadable grade is
unscored, never wrong. Its usage is recorded under role ``judge``.

The transcript's budget (what the judge reads of a long path): at most
:data:`MAX_STEPS_SHOWN` calls (the rest counted), each call's arguments cut
to :data:`ARGS_CHARS` characters and its result to :data:`RESULT_CHARS`, the
answer to :data:`ANSWER_CHARS`; a cut is marked with ``…``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from agentlab.agent.types import Completion, LLMProvider
from evaluation.judge.grader import JudgeRequest, judge_call
from evaluation.scoring.base import Score
from evaluation.scoring.trajectory_spec import PROTOCOL_TOOLS, TrajectoryStep

TRAJECTORY_JUDGE = "trajectory_judge"

MAX_STEPS_SHOWN = 30
ARGS_CHARS = 300
RESULT_CHARS = 400
ANSWER_CHARS = 1000

DEFAULT_TRAJECTORY_RUBRIC = (
    "The path is correct when every tool call was necessary to answer the question, each call "
    "used the right tool with the right arguments, and no call was repeated or wasted. It is "
    "partial when it reached the answer with unnecessary, repeated or badly aimed calls. It is "
    "incorrect when a needed call is missing, a call was wrong, or the answer does not follow "
    "from what the calls returned."
)

TRAJECTORY_JUDGE_PROMPT = """You grade the path an agent took to answer a question: the tool calls it \
made, with their arguments and results, and its final answer. Do not answer the question yourself; \
judge the path by the rubric.
Reply with ONE JSON object and nothing else:
{"grade": "correct" | "partial" | "incorrect", "explanation": "<one or two sentences>"}"""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def path_transcript(calls: Sequence[TrajectoryStep], answer: str) -> str:
    """The path as the judge reads it, within the module's budget; the
    protocol's ``final_answer``/``ask_user`` calls are left out (the answer
    follows)."""
    steps = [c for c in calls if c.tool not in PROTOCOL_TOOLS]
    lines = []
    for n, call in enumerate(steps[:MAX_STEPS_SHOWN], start=1):
        args = _cut(json.dumps(call.args, ensure_ascii=False, sort_keys=True), ARGS_CHARS)
        result = "(no result)" if call.result is None else _cut(call.result, RESULT_CHARS)
        lines.append(f"{n}. {call.tool}({args})\n   result: {result}")
    if len(steps) > MAX_STEPS_SHOWN:
        lines.append(f"… and {len(steps) - MAX_STEPS_SHOWN} more calls")
    shown = "\n".join(lines) or "(the agent called no tool)"
    return f"Path:\n{shown}\n\nFinal answer:\n{_cut(answer, ANSWER_CHARS) or '(none)'}"


def trajectory_judge_request(
    *,
    question: str,
    calls: Sequence[TrajectoryStep],
    answer: str,
    expected: Sequence[TrajectoryStep],
    rubric: str,
    model: str,
) -> JudgeRequest:
    """The judge's request for one path: the transcript as the "prediction",
    the expected path (if the example has one) as the "gold", the rubric
    (``""``: :data:`DEFAULT_TRAJECTORY_RUBRIC`)."""
    gold = "\n".join(step.label() for step in expected) or "(no expected path: judge by the rubric)"
    return JudgeRequest(
        question=question,
        prediction=path_transcript(calls, answer),
        gold=gold,
        rubric=rubric.strip() or DEFAULT_TRAJECTORY_RUBRIC,
        model=model,
    )


def trajectory_messages(request: JudgeRequest) -> list[dict[str, str]]:
    """The chat messages of one trajectory-judge call (OpenAI format)."""
    user = (
        f"Question:\n{request.question}\n\n{request.prediction}\n\nExpected path (a guide, not the only "
        f"good one):\n{request.gold}\n\nRubric:\n{request.rubric_text}\n\nYour JSON grade:"
    )
    return [{"role": "system", "content": TRAJECTORY_JUDGE_PROMPT}, {"role": "user", "content": user}]


def as_trajectory_judge(score: Score) -> Score:
    """A judge's :class:`Score` (or a cached one) under this scorer's name."""
    return dataclasses.replace(score, scorer=TRAJECTORY_JUDGE)


async def judge_path(
    provider: LLMProvider, request: JudgeRequest, *, max_tokens: int | None = 300, retry_attempts: int = 2
) -> tuple[Score, Completion | None]:
    """Grade one path with ``provider``: the :class:`Score` and the call's
    ``Completion`` (``None`` when the call failed: unscored, naming the error)."""
    return await judge_call(
        provider,
        trajectory_messages(request),
        scorer=TRAJECTORY_JUDGE,
        max_tokens=max_tokens,
        retry_attempts=retry_attempts,
    )
