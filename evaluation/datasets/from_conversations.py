"""Conversation examples from real conversations (docs/evaluating.md#from-chat-to-dataset):
staff pick conversations from the conversation list ("Add conversation to
dataset…"), confirm or correct each answer as that turn's gold answer (the
turn's own answer is the draft; a blank one leaves the turn unscored), and
each conversation becomes one conversation example of a dataset's next
version — as "Add to dataset…" does for one turn
(``evaluation.datasets.from_turns``).

An example made from conversation ``N``: ``question_id`` ``conversation-N``;
its ``turns`` are the conversation's user messages in order, each with its
gold answer when one was given — turns that failed or were cancelled are left
out, as the conversation's history leaves them out; ``source_conversation``
(``N``) is kept in its metadata. A conversation the dataset's current version
already holds (its ``question_id``) is reported and not added. All the new
examples make one version; nothing is written when anything is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import transaction

from common.errors import BadInput, NotFound
from evaluation.datasets.conversation_spec import ConversationLineError, conversation_fields
from evaluation.datasets.from_turns import MAX_TASK_TYPE, TurnsAdded, dataset_for_change
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import dataset_change, examples_at
from evaluation.scoring.scorer_names import PURE_SCORER_NAMES
from turns.models import Conversation, Turn, TurnStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User

#: Conversations one change may add.
MAX_CONVERSATIONS = 20
#: The turn statuses a conversation example keeps (the others are left out of it).
KEPT_STATUSES = frozenset({TurnStatus.SUCCEEDED})


def conversation_question_id(conversation_id: int) -> str:
    """The ``question_id`` of the example made from conversation ``conversation_id``."""
    return f"conversation-{conversation_id}"


def conversation_turns_kept(conversation_id: int) -> list[Turn]:
    """The turns a conversation example is made of: the conversation's
    finished turns (answered, or a clarifying question), in order."""
    rows = Turn.objects.filter(conversation_id=conversation_id, status__in=KEPT_STATUSES)
    return list(rows.order_by("position", "pk"))


@dataclass(frozen=True)
class ConversationPick:
    """One conversation to add: its pk and the gold answer of each of its
    kept turns by turn pk (``""`` or missing: that turn has no gold answer)."""

    conversation_id: int
    golds: Mapping[int, str] = field(default_factory=dict)


def examples_from_conversations(
    *,
    dataset_name: str,
    picks: Sequence[ConversationPick],
    task_type: str,
    scorer: str = "",
    create: bool = False,
    user: User | None = None,
) -> TurnsAdded:
    """Add each picked conversation to dataset ``dataset_name`` as one
    conversation example, all in one new version (module doc).

    ``create``: make the dataset when there is none by that name (else
    ``NotFound``). Raises, writing nothing: ``BadInput`` for no picks, more
    than ``MAX_CONVERSATIONS``, one given twice, a blank or too long task
    type, a scorer that is not a pure one, a conversation with no finished
    turn or no gold answer at all, a gold for a turn not in it; ``NotFound``
    for an unknown conversation."""
    specs_by_pick = _specs(picks, task_type=task_type.strip(), scorer=scorer)
    with transaction.atomic():
        dataset, created = dataset_for_change(dataset_name, create=create)
        current = set(examples_at(dataset).values_list("external_id", flat=True))
        specs, duplicates = [], []
        for pick, spec in zip(picks, specs_by_pick, strict=True):
            if spec.external_id in current:
                duplicates.append(pick.conversation_id)
                continue
            specs.append(spec)
        result = TurnsAdded(
            source="conversation",
            dataset=dataset,
            version=dataset.version,
            duplicates=duplicates,
            created=created,
        )
        if specs:
            source = "conversations " + ", ".join(
                str(p.conversation_id) for p in picks if p.conversation_id not in duplicates
            )
            change = dataset_change(dataset, upserts=specs, source=source, user=user, first=created)
            result.version, result.added = dataset.version, change.added
    return result


def _specs(picks: Sequence[ConversationPick], *, task_type: str, scorer: str) -> list[ExampleSpec]:
    """Each pick's example, checked as a dataset line is (``conversation_fields``)."""
    if not picks:
        raise BadInput("choose at least one conversation")
    if len(picks) > MAX_CONVERSATIONS:
        raise BadInput(f"choose at most {MAX_CONVERSATIONS} conversations at a time, not {len(picks)}")
    if len({p.conversation_id for p in picks}) != len(picks):
        raise BadInput("a conversation is given twice; nothing done")
    if not task_type or len(task_type) > MAX_TASK_TYPE:
        raise BadInput(f"the task type must be 1 to {MAX_TASK_TYPE} characters")
    if scorer and scorer not in PURE_SCORER_NAMES:
        raise BadInput(f"a conversation's turns are scored by a pure scorer, not {scorer!r}")
    return [_spec(pick, task_type=task_type, scorer=scorer) for pick in picks]


def _spec(pick: ConversationPick, *, task_type: str, scorer: str) -> ExampleSpec:
    if not Conversation.objects.filter(pk=pick.conversation_id).exists():
        raise NotFound(f"no conversation {pick.conversation_id}")
    turns = conversation_turns_kept(pick.conversation_id)
    where = f"conversation {pick.conversation_id}"
    if not turns:
        raise BadInput(f"{where} has no finished turn to make an example of")
    unknown = set(pick.golds) - {t.pk for t in turns}
    if unknown:
        raise BadInput(f"{where} has no finished turn {', '.join(map(str, sorted(unknown)))}")
    lines = []
    for turn in turns:
        line = {"user": turn.question}
        gold = (pick.golds.get(turn.pk) or "").strip()
        if gold:
            line["answer"] = gold
        if gold and scorer:
            line["scorer"] = scorer
        lines.append(line)
    if not any("answer" in line for line in lines):
        raise BadInput(f"{where}: give at least one turn a gold answer (its answer is the draft)")
    try:
        fields = conversation_fields({"turns": lines}, pure_scorers=PURE_SCORER_NAMES)
    except ConversationLineError as exc:
        raise BadInput(f"{where}: {exc}") from None
    return ExampleSpec(
        external_id=conversation_question_id(pick.conversation_id),
        question=fields.question,
        answer=fields.answer,
        task_type=task_type,
        metadata={**fields.metadata, "source_conversation": pick.conversation_id},
    )
