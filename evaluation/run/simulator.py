"""The user simulator of a simulated-user example (docs/evaluating.md#simulated-users).

An LLM plays the user: from the persona, the goal and the conversation so far
it writes the user's next message, or the stop marker ``###STOP###`` when the
goal is met or given up — τ-bench's convention (Yao et al. 2024, "τ-bench: A
Benchmark for Tool-Agent-User Interaction in Real-World Domains"), which
promptfoo's ``simulated-user`` provider follows too.

**Paired simulation.** Each call is sampled with the run's fixed temperature
(``--user-temperature``) and a seed made from the example's ``question_id``
and the epoch (``simulator_seed``; ``agentlab.agent.seeding``), never from the
run: two variants of an experiment meet the same simulated user — the same
first message, and the same next message whenever their answers so far are
the same.

A call that fails (a provider error after the retries) or writes nothing is a
``SimulatorFailure``: the conversation ends there with the cause recorded
(``evaluation.run.conversation_score``), never a hung run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.agent.retry import complete_with_retries
from agentlab.agent.seeding import sampling_seeded
from agentlab.agent.types import LLMProvider, ProviderError
from agentlab.agent.usage import UsageTotals

#: What the simulated user writes to end the conversation (τ-bench's marker).
STOP_MARKER = "###STOP###"
#: The most tokens one simulated message may take.
SIMULATOR_MAX_TOKENS = 256
#: ``--user-temperature``'s default: the simulated user varies its wording.
DEFAULT_USER_TEMPERATURE = 0.7

_SYSTEM = """You are role-playing a user who is talking to an AI assistant. Stay in character.
{persona}Your goal in this conversation: {goal}

Write only the user's next message: short, in the first person, as this user would write it.
Do not answer for the assistant and do not explain yourself.
When your goal has been met, or you give up on it, reply with exactly {stop} and nothing else."""

_BEGIN = "(The conversation starts now. Write your first message to the assistant.)"


class SimulatorFailure(Exception):
    """The simulator could not write the next message; ``usage`` is what its
    calls cost (``UsageTotals.to_dict()``, role ``user_simulator``)."""

    def __init__(self, message: str, usage: dict[str, Any]) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class SimulatedMessage:
    """The simulator's reply: the next ``text`` (``None`` when it wrote the
    stop marker: the conversation ends) and the call's ``usage``."""

    text: str | None
    usage: dict[str, Any]

    @property
    def stop(self) -> bool:
        return self.text is None


@dataclass(frozen=True)
class UserSimulator:
    """The simulated user of a run: its ``provider`` (``--user-model``), the
    sampling ``temperature`` fixed by the run, and ``seed``, the base every
    (example, epoch)'s seed is made from (``--user-seed``)."""

    provider: LLMProvider
    temperature: float = DEFAULT_USER_TEMPERATURE
    seed: int = 0

    async def next_message(
        self, user: dict[str, Any], exchanges: Sequence[tuple[str, str]], *, question_id: str, epoch: int
    ) -> SimulatedMessage:
        """The user's next message after ``exchanges`` (``(user message,
        agent reply)`` pairs, oldest first) for simulated user ``user``
        (``{"persona", "goal", ...}``), seeded per (``question_id``,
        ``epoch``). Raises ``SimulatorFailure`` for a failed call or an empty
        reply."""
        usage = UsageTotals()
        seed = simulator_seed(self.seed, question_id, epoch)
        try:
            with sampling_seeded(seed):
                completion = await complete_with_retries(
                    self.provider,
                    simulator_messages(user, exchanges),
                    None,
                    attempts=3,
                    max_tokens=SIMULATOR_MAX_TOKENS,
                    temperature=self.temperature,
                    role="user_simulator",
                )
        except ProviderError as exc:
            raise SimulatorFailure(f"the user simulator failed: {exc}", usage.to_dict()) from None
        usage.add(completion, role="user_simulator")
        text = (completion.text or "").strip()
        if STOP_MARKER in text:
            return SimulatedMessage(text=None, usage=usage.to_dict())
        if not text:
            raise SimulatorFailure("the user simulator wrote no message", usage.to_dict())
        return SimulatedMessage(text=text, usage=usage.to_dict())


def simulator_seed(base: int, question_id: str, epoch: int) -> int:
    """The seed of an (example, epoch)'s simulated user: the first 31 bits of
    SHA-256 of ``base``, ``question_id`` and ``epoch`` — the same for every
    variant and run on that example and epoch."""
    digest = hashlib.sha256(f"{base}\x1f{question_id}\x1f{epoch}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def simulator_messages(user: dict[str, Any], exchanges: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The simulator's chat messages (OpenAI format): the role it plays, then
    the conversation with the roles turned round — its own (the user's)
    messages as ``assistant``, the agent's replies as ``user``."""
    persona = str(user.get("persona") or "").strip()
    system = _SYSTEM.format(
        persona=f"Who you are: {persona}\n" if persona else "", goal=user["goal"], stop=STOP_MARKER
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": _BEGIN},
    ]
    for said, reply in exchanges:
        messages.append({"role": "assistant", "content": said})
        messages.append({"role": "user", "content": reply or "(the assistant gave no answer)"})
    return messages
