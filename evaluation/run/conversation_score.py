"""Scoring a conversation example (docs/evaluating.md#conversation-examples):
its prediction's fields from the conversation's turns, once the conversation
has ended.

The verdict (``Prediction.correct``), by kind:

- a scripted conversation (``turns``): every turn with a gold answer is scored
  by its own scorer (else the example's); the example is right when **every
  scored turn is right** — a turn not reached (the conversation ended on a
  failed turn) is wrong; unscored when no turn has a gold answer. The last
  scored turn's verdict and the per-turn accuracy are reported beside it
  (``conversation_result``);
- a simulated user with ``success.answer``: right when some answer of the
  agent's states it (the example's scorer); ``turns_to_goal`` is the first
  turn that did;
- a simulated user with ``success.rubric``: the LLM judge grades the whole
  conversation with the rubric after the drive (scorer ``goal``: the row awaits
  the judge, ``evaluation.judge.judge_pass``); ``turns_to_goal`` is then the
  number of turns, when it succeeded.

A conversation that ended in an error (a failed turn, a user simulator that
failed) is wrong with the cause in ``error`` — errored counts as wrong, as for
any example.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from agentlab.agent.text import safe_fields
from agentlab.agent.usage import UsageTotals
from evaluation.datasets.conversation_spec import SUCCESS_KEY, TURNS_KEY, conversation_kind
from evaluation.models import Example
from evaluation.run.record import AWAITING_JUDGE, example_scorer
from evaluation.scoring.base import Score
from evaluation.scoring.dispatch import score
from evaluation.scoring.scorer_names import GOAL_SCORER, PURE_SCORER_NAMES
from turns.attempts import last_review_of, turn_attempts, usage_sum
from turns.meta import meta_failure
from turns.models import Turn, TurnOutcome


@dataclass(frozen=True)
class ConversationEnd:
    """How a conversation ended: ``reason`` — ``script_done`` (every scripted
    message sent), ``stop_marker`` (the simulated user wrote the stop
    marker), ``max_turns`` (the simulated user's limit), ``turn_failed``
    (an agent turn did not finish), ``cancelled`` (a turn was cancelled, or
    the run was: ``manage.py cancel_run``), ``simulator_failed`` (the user
    simulator's call failed or wrote nothing) — the ``cause`` in
    words when it is an error, and the simulator's ``usage``
    (``UsageTotals.to_dict()``, role ``user_simulator``)."""

    reason: str
    cause: str = ""
    simulator_usage: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.reason in ("turn_failed", "simulator_failed", "cancelled")


def transcript(turns: Sequence[Turn]) -> str:
    """The conversation as text, one message a paragraph: ``User: …`` and
    ``Agent: …`` (a clarifying question as the agent's, a turn without an
    answer as ``(no answer: <outcome>)``)."""
    lines = []
    for turn in turns:
        lines.append(f"User: {turn.question}")
        lines.append(f"Agent: {agent_reply(turn) or f'(no answer: {turn.outcome or turn.status})'}")
    return "\n\n".join(lines)


def agent_reply(turn: Turn) -> str:
    """What the agent said in ``turn``: its answer, or its clarifying question; ``""``: nothing."""
    if turn.outcome == TurnOutcome.ANSWERED:
        return turn.answer
    if turn.outcome == TurnOutcome.ASKED:
        return turn.clarifying_question
    return ""


def _answer(turn: Turn | None) -> str | None:
    return turn.answer if turn is not None and turn.outcome == TurnOutcome.ANSWERED else None


def _turn_score(example: Example, spec: dict[str, Any], turn: Turn | None) -> dict[str, Any]:
    """One scripted turn's record: its message, the agent's answer, and its
    score when it has a gold answer."""
    record: dict[str, Any] = {
        "position": turn.position if turn is not None else None,
        "turn_id": turn.pk if turn is not None else None,
        "user": spec["user"],
        "answer": _answer(turn),
        "outcome": turn.outcome if turn is not None else "not reached",
    }
    if "answer" not in spec:
        return record
    scorer = spec.get("scorer") or example_scorer(example)
    if scorer not in PURE_SCORER_NAMES:
        result = Score.unscored(scorer, f"a turn is scored by a pure scorer, not {scorer!r}")
    else:
        result = score(
            prediction=_answer(turn),
            gold=spec["answer"],
            scorer=scorer,
            choices=example.choices,
            metadata=example.metadata,
        )
    record.update(
        gold=spec["answer"],
        scorer=scorer,
        score=result.value,
        correct=result.correct,
        explanation=result.explanation,
    )
    return record


def scripted_result(example: Example, turns: Sequence[Turn]) -> tuple[Score, dict[str, Any]]:
    """A scripted conversation's verdict and its ``conversation_result``:
    ``turns`` (each turn's record), ``verdict_rule`` (``every_scored_turn``),
    ``scored_turns``, ``correct_turns``, ``turn_accuracy`` (``None``: none
    scored) and ``last_turn_correct``."""
    specs = (example.metadata or {})[TURNS_KEY]
    by_position = {turn.position: turn for turn in turns}
    records = [_turn_score(example, spec, by_position.get(i)) for i, spec in enumerate(specs, start=1)]
    scored = [r for r in records if r.get("correct") is not None]
    right = sum(1 for r in scored if r["correct"])
    result = {
        "kind": "turns",
        "turns": records,
        "verdict_rule": "every_scored_turn",
        "scored_turns": len(scored),
        "correct_turns": right,
        "turn_accuracy": right / len(scored) if scored else None,
        "last_turn_correct": scored[-1]["correct"] if scored else None,
    }
    if not scored:
        return Score.unscored("conversation", "no turn of the conversation has a gold answer"), result
    verdict = right == len(scored)
    return Score.of(verdict, "conversation", f"{right} of {len(scored)} scored turns right"), result


def simulated_result(example: Example, turns: Sequence[Turn]) -> tuple[Score | None, dict[str, Any]]:
    """A simulated conversation's verdict (``None``: the judge's to give, with
    the rubric) and its ``conversation_result``: ``turns`` (each message and
    answer), ``turns_to_goal`` (``None``: not reached, or the judge's)."""
    records = [
        {
            "position": t.position,
            "turn_id": t.pk,
            "user": t.question,
            "answer": agent_reply(t),
            "outcome": t.outcome,
        }
        for t in turns
    ]
    result: dict[str, Any] = {"kind": "simulated", "turns": records, "turns_to_goal": None}
    success = (example.metadata or {}).get(SUCCESS_KEY) or {}
    if "answer" not in success:
        return None, result
    scorer = example_scorer(example)
    if scorer not in PURE_SCORER_NAMES:
        return Score.unscored(scorer, f"success.answer is scored by a pure scorer, not {scorer!r}"), result
    for turn in turns:
        got = score(prediction=_answer(turn), gold=success["answer"], scorer=scorer, choices=example.choices)
        if got.correct:
            result["turns_to_goal"] = turn.position
            return Score.of(True, scorer, f"stated at turn {turn.position}: {got.explanation}"), result
    return Score.of(False, scorer, "no answer of the agent's stated the goal's answer"), result


def conversation_values(*, example: Example, turns: Sequence[Turn], end: ConversationEnd) -> dict[str, Any]:
    """The fields of a conversation example's completed prediction (a dict of
    ``Prediction`` field values; see the module doc for the verdict). The
    prediction text is the conversation's ``transcript``; its tokens and cost
    are the agent's (every turn's attempts), its ``usage`` adds the
    simulator's calls under role ``user_simulator``, kept apart so playing the
    user is never read as the agent's cost;
    steps and latency are the turns' sums. A rubric-judged simulated
    conversation that ended without error is left ``AWAITING_JUDGE`` under
    scorer ``goal`` with ``completed_at`` ``None``."""
    kind = conversation_kind(example.metadata)
    verdict: Score | None
    if kind == "turns":
        verdict, result = scripted_result(example, turns)
    else:
        verdict, result = simulated_result(example, turns)
    result.update(ended=end.reason, cause=end.cause)
    awaiting = verdict is None and not end.failed
    if end.failed:
        verdict = Score.of(
            False, verdict.scorer if verdict else GOAL_SCORER, f"the conversation ended early: {end.cause}"
        )
    elif verdict is None:
        verdict = Score.unscored(GOAL_SCORER, AWAITING_JUDGE)
    agent = UsageTotals()  # the agent's (and its reviewer's) calls: the row's tokens and cost
    archived = {turn.pk: turn_attempts(turn) for turn in turns}
    for turn in turns:
        agent.merge(UsageTotals.from_dict(usage_sum(turn.usage, archived[turn.pk])))
    tokens_known = agent.calls > 0 and agent.unknown_calls == 0
    usage = UsageTotals.from_dict(agent.to_dict())  # and the simulated user's, apart by role
    usage.merge(UsageTotals.from_dict(dict(end.simulator_usage or {})))
    last = turns[-1] if turns else None
    review = last_review_of(last.meta, archived[last.pk]) if last is not None else None
    return safe_fields(
        {
            "prediction": transcript(turns),
            "scorer": GOAL_SCORER if awaiting else verdict.scorer,
            "score": verdict.value,
            "correct": verdict.correct,
            "score_explanation": verdict.explanation,
            "judgement": {},
            "evidence": last.evidence if last is not None else "",
            "reasoning": last.reasoning if last is not None else "",
            "steps": sum(turn.steps for turn in turns),
            "input_tokens": agent.input_tokens if tokens_known else None,
            "output_tokens": agent.output_tokens if tokens_known else None,
            "cost": agent.cost,
            "stop_reason": "cancelled"
            if end.reason == "cancelled"
            else ((last.stop_reason if last is not None else "") or "error"),
            "error": _error(end, turns),
            "latency_ms": sum(int((turn.timings or {}).get("total_ms") or 0) for turn in turns) or None,
            "review_retried": any(turn.attempts > 1 for turn in turns),
            "first_correct": verdict.correct,
            "review_verdict": str(review["verdict"]) if review else "",
            "usage": usage.to_dict(),
            "answer_mismatch": "",
            "conversation_result": result,
            "completed_at": None if awaiting else timezone.now(),
        }
    )


def _error(end: ConversationEnd, turns: Sequence[Turn]) -> str:
    """The row's error: the cause of a conversation that ended in one (a
    failed turn's own cause when it has one); ``""`` otherwise."""
    if not end.failed:
        return ""
    if end.reason == "turn_failed" and turns:
        cause, failure = meta_failure(turns[-1].meta)
        detail = failure or cause
        return f"{end.cause}: {detail}" if detail else end.cause
    return end.cause
