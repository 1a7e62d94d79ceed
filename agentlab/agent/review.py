"""The reviewer: one LLM call that judges an answered attempt (docs/architecture.md#the-turn-lifecycle).

After an attempt ends with stop reason ``final``, the driver asks the same
provider, with the prompt below, for a JSON verdict::

    {"verdict": "accept" | "retry" | "cannot_judge",
     "note": "one or two sentences",
     "retry_instruction": "what to do differently" | null}

``retry`` with a non-empty ``retry_instruction`` makes the driver run one more
attempt whose question is ``retry_question(...)``. Models wrap JSON in prose
or code fences, use other words for the verdict or drop fields: ``parse_review``
takes what it can and says ``failed`` (with the reason) only when there is no
verdict at all. No Django here (CONTRIBUTING.md#the-agent-core-has-no-django); the driver records the result.

The seed turn driver the product was first described from reviewed each run and retried once
on the reviewer's instruction; this is the same idea for an agent loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentlab.agent.retry import complete_with_retries
from agentlab.agent.types import Completion, LLMProvider, Step

Verdict = Literal["accept", "retry", "cannot_judge", "failed"]
VERDICTS: tuple[str, ...] = ("accept", "retry", "cannot_judge", "failed")

REVIEW_SYSTEM_PROMPT = """You review an AI agent's answer to a question. \
Judge whether the answer is correct and supported by the evidence and the trace of tool calls.
Reply with ONE JSON object and nothing else:
{"verdict": "accept" | "retry" | "cannot_judge", "note": "<one or two sentences>", \
"retry_instruction": "<what the agent must do differently>" or null}
- "accept": the answer is right and supported.
- "retry": the answer is wrong, unsupported or incomplete; say in retry_instruction what to fix.
- "cannot_judge": you cannot tell."""

#: The reply ``REVIEW_SYSTEM_PROMPT`` asks for, as a JSON schema: a provider
#: with constrained decoding (the local model) decodes the review under it,
#: so every review it writes has a verdict ("verdict" comes first: a note cut
#: by the token limit still leaves it readable).
REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["accept", "retry", "cannot_judge"]},
        "note": {"type": "string"},
        "retry_instruction": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["verdict", "note", "retry_instruction"],
    "additionalProperties": False,
}

#: The error of a review whose reply the output-token limit cut off.
REVIEW_CUT_ERROR = "the reviewer's reply was cut off by the output-token limit"

#: How much of each tool output the compact trace keeps (characters).
TRACE_OUTPUT_CHARS = 300
#: How many steps the compact trace keeps (the last ones).
TRACE_STEPS = 12

_SYNONYMS = {
    "accept": "accept",
    "accepted": "accept",
    "ok": "accept",
    "correct": "accept",
    "pass": "accept",
    "approve": "accept",
    "approved": "accept",
    "yes": "accept",
    "good": "accept",
    "retry": "retry",
    "reject": "retry",
    "rejected": "retry",
    "wrong": "retry",
    "incorrect": "retry",
    "fail": "retry",
    "redo": "retry",
    "revise": "retry",
    "cannot_judge": "cannot_judge",
    "cannot judge": "cannot_judge",
    "cannot-judge": "cannot_judge",
    "unknown": "cannot_judge",
    "unsure": "cannot_judge",
    "uncertain": "cannot_judge",
    "n/a": "cannot_judge",
}


@dataclass(frozen=True)
class Review:
    """A reviewer's verdict. ``failed`` means the reviewer itself failed
    (provider error, no verdict in its reply); ``error`` then says why.
    ``retry_instruction`` is ``None`` unless the verdict is ``retry``."""

    verdict: Verdict
    note: str = ""
    retry_instruction: str | None = None
    error: str | None = None

    @property
    def wants_retry(self) -> bool:
        """A retry verdict that says what to do differently."""
        return self.verdict == "retry" and bool(self.retry_instruction)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "note": self.note,
            "retry_instruction": self.retry_instruction,
            "error": self.error,
        }


def compact_trace(
    steps: Sequence[Step], *, output_chars: int = TRACE_OUTPUT_CHARS, max_steps: int = TRACE_STEPS
) -> str:
    """The attempt's steps as short text lines: ``step N: call name(args) -> output``
    (outputs cut to ``output_chars``; only the last ``max_steps`` steps)."""
    lines: list[str] = []
    for step in list(steps)[-max_steps:]:
        results = {r.call_id: r for r in step.results}
        if not step.completion.tool_calls:
            lines.append(f"step {step.index}: replied with text")
        for call in step.completion.tool_calls:
            result = results.get(call.id)
            args = json.dumps(call.arguments, ensure_ascii=False)[:200]
            output = "(no result)" if result is None else result.output.replace("\n", " ")[:output_chars]
            flag = " [error]" if result is not None and result.is_error else ""
            lines.append(f"step {step.index}: {call.name}({args}) ->{flag} {output}")
    return "\n".join(lines) or "(no tool calls)"


def review_messages(
    *, question: str, answer: str, evidence: str, reasoning: str, trace: str, conversation: str = ""
) -> list[dict[str, Any]]:
    """The chat messages of one review call (OpenAI format). ``conversation``:
    the turns before the question, as text (``history.conversation_text``),
    which a follow-up question ("double it") cannot be judged without."""
    before = f"Earlier in the conversation:\n{conversation}\n\n" if conversation else ""
    user = before + (
        f"Question:\n{question}\n\nAnswer:\n{answer}\n\nEvidence:\n{evidence or '(none)'}\n\n"
        f"Reasoning:\n{reasoning or '(none)'}\n\nTrace:\n{trace}\n\nYour JSON verdict:"
    )
    return [{"role": "system", "content": REVIEW_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object that can be decoded from ``text``, outermost first.
    A raw control character inside a string (a newline in a note, which
    llama-cpp-python's server grammar lets a model write) is read as itself."""
    decoder = json.JSONDecoder(strict=False)
    found: list[dict[str, Any]] = []
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        index = text.find("{", end)
    return found


def _verdict_of(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    key = value.strip().lower().rstrip(".!")
    return _SYNONYMS.get(key) or _SYNONYMS.get(key.replace("-", "_").replace(" ", "_"))


def parse_review(text: str | None) -> Review:
    """Read a reviewer's reply into a ``Review``.

    Takes the first JSON object (code fences and prose around it are ignored)
    with a recognisable ``verdict`` (synonyms such as ``correct`` or ``wrong``
    are mapped); failing JSON, a bare ``verdict: word`` line will do. A
    ``retry`` without an instruction uses the note as the instruction. No
    verdict at all gives ``Review("failed", error=…)``.
    """
    text = (text or "").strip()
    if not text:
        return Review("failed", error="the reviewer returned nothing")
    for obj in json_objects(text):
        verdict = _verdict_of(obj.get("verdict"))
        if verdict is None:
            continue
        note = str(obj.get("note") or obj.get("reason") or "").strip()
        instruction = obj.get("retry_instruction") or obj.get("instruction")
        instruction = str(instruction).strip() if instruction else None
        if verdict != "retry":
            instruction = None
        elif not instruction:
            instruction = note or None
        return Review(verdict, note=note, retry_instruction=instruction)  # type: ignore[arg-type]
    match = re.search(r'"?verdict"?\s*[:=]\s*"?([A-Za-z_ \-/]+)', text)
    if match:
        verdict = _verdict_of(match.group(1).strip().split()[0] if match.group(1).strip() else "")
        if verdict is not None:
            return Review(verdict, note="", retry_instruction=None)  # type: ignore[arg-type]
    return Review("failed", error=f"no verdict in the reviewer's reply: {text[:200]!r}")


def retry_question(*, question: str, previous_answer: str, instruction: str) -> str:
    """The question of an attempt that follows a ``retry`` verdict: the
    original question, the previous answer as context, and the instruction."""
    return (
        f"{question}\n\n"
        f"A reviewer checked a previous attempt at this question and asked for another try.\n"
        f"Previous answer: {previous_answer}\n"
        f"Reviewer's instruction: {instruction}"
    )


async def review_answer(
    provider: LLMProvider,
    *,
    question: str,
    answer: str,
    evidence: str,
    reasoning: str,
    steps: Sequence[Step] = (),
    max_tokens: int | None = 400,
    retry_attempts: int = 2,
    conversation: str = "",
) -> tuple[Review, Completion]:
    """Ask ``provider`` to review one answered attempt.

    Returns the parsed ``Review`` and the reviewer's ``Completion`` (its usage
    is the caller's to record; ``decoding`` says whether it was decoded under
    ``REVIEW_SCHEMA``, which providers with ``constrained_decoding`` do).
    A reply cut by ``max_tokens`` (``finish_reason: length``) is a
    ``failed`` review (``REVIEW_CUT_ERROR``), never the verdict it began
    with. Raises ``ProviderError`` when the call fails after its retries — the
    caller records that as a ``failed`` review. ``conversation``: the turns
    before the question, as text (``review_messages``).
    """
    messages = review_messages(
        question=question,
        answer=answer,
        evidence=evidence,
        reasoning=reasoning,
        trace=compact_trace(steps),
        conversation=conversation,
    )
    constrained = bool(getattr(provider, "constrained_decoding", False))
    completion = await complete_with_retries(
        provider,
        messages,
        None,
        attempts=retry_attempts,
        max_tokens=max_tokens,
        temperature=0.0,
        response_schema=REVIEW_SCHEMA if constrained else None,
        role="review",
    )
    if completion.truncated:
        # cut by the token limit: whatever verdict it began is not a review
        # (as a cut final answer is not an answer)
        return Review("failed", error=REVIEW_CUT_ERROR), completion
    return parse_review(completion.text), completion
