"""A conversation's earlier turns as chat messages, fitted to a token budget (issue 41).

A turn of a conversation is answered with the conversation before it: each
earlier turn's question as a user message and its answer (or the clarifying
question it asked) as an assistant message, oldest first, between the system
prompt and the turn's own question (``messages.build_messages``). Two modes
(``HistoryMode``):

- ``answers``: the question and the answer of each earlier turn;
- ``full``: also the tool calls and results of its steps, in the form the
  provider reads (native ``tool_calls`` and ``tool`` messages, or the
  JSON-in-text protocol's call and observation) — never the turn-ending
  calls (``final_answer``, ``ask_user``), whose content is the answer.

Only turns that ended with an answer or a clarifying question are given;
the others (cancelled, failed, interrupted, rejected) are left out and named
with the reason. The history fits a budget: half of what the context window
leaves after the reply budget and the turn's own first request (system
prompt, tool specs, question) — the other half stays for the turn's own
steps, so a turn never overflows its context because its history grew
(``history_budget``). Whole turns are dropped, oldest first, until the rest
fits (``fit_history``). Tokens are counted with the provider's tokenizer
when it has one (``token_counter_of``), else estimated at one token per
three bytes of UTF-8; each message adds ``MESSAGE_OVERHEAD_TOKENS`` for the
chat template's role header and end marker.

The driver records the result (``History.to_data``) in the turn's event log
before the first LLM call and gives a resumed or retried turn the recorded
messages again (docs/architecture.md#the-driver), so its requests are the
same byte for byte. No Django here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from agentlab.agent.protocol import observation_message
from agentlab.agent.types import Step, ToolCall

HistoryMode = Literal["answers", "full"]
HISTORY_MODES: tuple[HistoryMode, ...] = ("answers", "full")
#: Tokens a chat template adds around one message (ChatML's
#: ``<|im_start|>role\n`` … ``<|im_end|>\n`` is 5; Llama 3's header 4 + 1).
MESSAGE_OVERHEAD_TOKENS = 8
#: The estimate without a tokenizer, in bytes of UTF-8: English runs about
#: four characters a token, JSON and numbers fewer, so three errs on the side
#: of dropping; bytes rather than characters, because a Chinese or Japanese
#: character (three bytes) is about a token of its own.
BYTES_PER_TOKEN = 3
#: The outcomes whose turn is given to the turns after it.
GIVEN_OUTCOMES = ("answered", "asked")

TextCounter = Callable[[str], int]


@dataclass(frozen=True)
class EarlierTurn:
    """One earlier turn of the conversation: ``turn_id``, its ``position``,
    the ``question``, its ``status`` and ``outcome`` (``turns.models``
    values), ``reply`` — the answer, or the clarifying question of an
    ``asked`` turn — and, for ``full``, the ``steps`` of its last attempt."""

    turn_id: int
    position: int
    question: str
    status: str
    outcome: str
    reply: str
    steps: tuple[Step, ...] = ()

    @property
    def given(self) -> bool:
        """Whether the turns after it see it: it ended answered or asked."""
        return self.status == "succeeded" and self.outcome in GIVEN_OUTCOMES

    @property
    def left_out_reason(self) -> str:
        """Why a turn that is not given is left out: its outcome (``rejected``,
        ``cancelled``, ``failed``) or else its status (``interrupted`` …)."""
        return self.outcome or self.status


@dataclass(frozen=True)
class History:
    """What one turn is given of its conversation.

    ``messages``: the user/assistant (and, ``full``, tool) messages put
    before its question; ``turns``: the ids of the earlier turns they hold,
    oldest first; ``tokens``: their size as counted (``counted``:
    ``tokenizer`` or ``estimate``); ``budget``: what they could take of the
    ``window`` (tokens) after ``reply_tokens``; ``dropped``: the earlier
    turns not given, oldest first, each ``{"turn", "position", "reason"}``
    with reason ``budget`` or what ended the turn."""

    mode: HistoryMode
    messages: list[dict[str, Any]]
    turns: list[int]
    tokens: int
    budget: int
    window: int
    reply_tokens: int
    counted: str
    dropped: list[dict[str, Any]] = field(default_factory=list)

    def to_data(self, *, attempt: int) -> dict[str, Any]:
        """The ``history`` event's payload (``turns.event_types.HistoryData``)."""
        return {
            "attempt": attempt,
            "mode": self.mode,
            "turns": list(self.turns),
            "tokens": self.tokens,
            "budget": self.budget,
            "window": self.window,
            "reply_tokens": self.reply_tokens,
            "counted": self.counted,
            "dropped": [dict(d) for d in self.dropped],
            "messages": [dict(m) for m in self.messages],
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> History:
        """The history a ``history`` event recorded (``to_data``'s shape)."""
        mode = data.get("mode")
        return cls(
            mode=cast(HistoryMode, mode if mode in HISTORY_MODES else "answers"),
            messages=[dict(m) for m in data.get("messages") or []],
            turns=[int(t) for t in data.get("turns") or []],
            tokens=int(data.get("tokens") or 0),
            budget=int(data.get("budget") or 0),
            window=int(data.get("window") or 0),
            reply_tokens=int(data.get("reply_tokens") or 0),
            counted=str(data.get("counted") or ""),
            dropped=[dict(d) for d in data.get("dropped") or []],
        )


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` without a tokenizer: one per ``BYTES_PER_TOKEN``
    bytes of its UTF-8, rounded up."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def token_counter_of(provider: Any) -> tuple[TextCounter, str]:
    """How ``provider``'s tokens are counted: its ``count_tokens(text)``
    (the embedded model's tokenizer), else its ``token_counter`` (an
    endpoint's GGUF tokenizer, ``providers.token_count``), each tried once
    on a probe — then ``"tokenizer"`` — else ``estimate_tokens``
    (``"estimate"``)."""
    counter = getattr(provider, "count_tokens", None)
    if not callable(counter):
        counter = getattr(getattr(provider, "token_counter", None), "count", None)
    if callable(counter):
        try:
            counter("probe")
        except Exception:  # no local extra, an unreadable file: estimate instead
            return estimate_tokens, "estimate"
        return cast(TextCounter, counter), "tokenizer"
    return estimate_tokens, "estimate"


def message_tokens(messages: Sequence[dict[str, Any]], count: TextCounter) -> int:
    """The tokens of ``messages``: each one's text (its content, and its
    tool calls as JSON) counted with ``count``, plus ``MESSAGE_OVERHEAD_TOKENS``."""
    total = 0
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if message.get("tool_calls"):
            text += json.dumps(message["tool_calls"], ensure_ascii=False)
        total += count(text) + MESSAGE_OVERHEAD_TOKENS
    return total


def history_budget(*, window: int, reply_tokens: int, request_tokens: int) -> int:
    """The tokens a turn's history may take: half of what the context
    ``window`` leaves after the reply budget (``reply_tokens``, the
    output-token limit) and the turn's own first request without history
    (``request_tokens``); the other half is kept for the turn's own steps.
    Never negative."""
    return max(0, (window - reply_tokens - request_tokens) // 2)


def turn_messages(
    turn: EarlierTurn, *, mode: HistoryMode, native_tools: bool, ends_turn: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """The messages of one earlier turn: its question (user), under
    ``full`` the calls of its steps that do not end the turn
    (``ends_turn(name)``) with their results, then its reply (assistant)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": turn.question}]
    if mode == "full":
        for step in turn.steps:
            messages.extend(
                _step_messages(turn.turn_id, step, native_tools=native_tools, ends_turn=ends_turn)
            )
    messages.append({"role": "assistant", "content": turn.reply})
    return messages


def _step_messages(
    turn_id: int, step: Step, *, native_tools: bool, ends_turn: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """One step's calls that have a result and do not end the turn, in the
    provider's form. Call ids get the turn's id in front (``t7_call_1``), so
    they never collide with the current turn's."""
    by_id = {r.call_id: r for r in step.results}
    calls: list[ToolCall] = [
        c for c in step.completion.tool_calls if c.id in by_id and c.name and not ends_turn(c.name)
    ]
    if not calls:
        return []
    if native_tools:
        ids = {c.id: f"t{turn_id}_{c.id}" for c in calls}
        messages: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": ids[c.id],
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(c.arguments, ensure_ascii=False),
                        },
                    }
                    for c in calls
                ],
            }
        ]
        messages.extend(
            {"role": "tool", "tool_call_id": ids[c.id], "content": by_id[c.id].output} for c in calls
        )
        return messages
    messages = []
    for c in calls:  # the text protocol: one call per reply, then its observation
        call_text = json.dumps({"tool": c.name, "arguments": c.arguments}, ensure_ascii=False)
        messages.append({"role": "assistant", "content": call_text})
        messages.append({"role": "user", "content": observation_message([by_id[c.id]])})
    return messages


def fit_history(
    turns: Sequence[EarlierTurn],
    *,
    mode: HistoryMode,
    native_tools: bool,
    ends_turn: Callable[[str], bool],
    budget: int,
    window: int,
    reply_tokens: int,
    count: TextCounter,
    counted: str,
) -> History:
    """The ``History`` of a turn whose earlier turns are ``turns`` (oldest
    first): the given ones (``EarlierTurn.given``) newest first while their
    messages fit ``budget`` tokens together; the first that does not fit is
    dropped with every older one (reason ``budget``), so what is given is
    always the most recent stretch of the conversation."""
    usable = [t for t in turns if t.given]
    kept: list[tuple[EarlierTurn, list[dict[str, Any]]]] = []
    tokens = 0
    over = False
    for turn in reversed(usable):
        messages = turn_messages(turn, mode=mode, native_tools=native_tools, ends_turn=ends_turn)
        size = message_tokens(messages, count)
        if over or tokens + size > budget:
            over = True
            continue
        kept.append((turn, messages))
        tokens += size
    kept.reverse()
    given = {turn.turn_id for turn, _ in kept}
    dropped = [
        {"turn": t.turn_id, "position": t.position, "reason": "budget" if t.given else t.left_out_reason}
        for t in turns
        if t.turn_id not in given
    ]
    return History(
        mode=mode,
        messages=[m for _, messages in kept for m in messages],
        turns=[turn.turn_id for turn, _ in kept],
        tokens=tokens,
        budget=budget,
        window=window,
        reply_tokens=reply_tokens,
        counted=counted,
        dropped=dropped,
    )


#: How the reviewer's text names each role of a history message.
_SPEAKERS = {"user": "User", "assistant": "Assistant", "tool": "Tool result"}


def conversation_text(messages: Sequence[dict[str, Any]]) -> str:
    """History ``messages`` as plain lines for a prompt that is not a chat
    (the reviewer's): ``User: …`` / ``Assistant: …``, a native tool call as
    ``Assistant calls name(arguments)``, a tool's result as ``Tool result: …``."""
    lines = []
    for message in messages:
        speaker = _SPEAKERS.get(str(message.get("role")), str(message.get("role")))
        content = message.get("content")
        if isinstance(content, str) and content:
            lines.append(f"{speaker}: {content}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            lines.append(f"{speaker} calls {function.get('name')}({function.get('arguments')})")
    return "\n".join(lines)
