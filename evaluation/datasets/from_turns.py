"""Examples from chat turns: staff pick turns, confirm or correct each
turn's answer as the gold answer, and the examples are added to a dataset as
its next version (docs/evaluating.md#from-chat-turns-to-examples).

An example made from turn ``N``:

- ``question_id`` is ``turn-N`` (:func:`turn_question_id`);
- ``question`` is the turn's question, ``answer`` the gold answer staff gave
  (by default the turn's own answer, a draft to confirm);
- ``metadata`` is :class:`TurnExampleMetadata`: ``source_turn`` (``N``) and
  ``conversation``, the questions and answers of the turns before it in its
  conversation, oldest first (``[]`` for a turn without one).

A turn is a *duplicate*, reported and not added, when the dataset's current
version already holds its question text, an example whose ``source_turn`` is
the turn, or its ``question_id``; so is a second turn with the same question
in one request. All the new examples make one version (one
:func:`~evaluation.datasets.versions.dataset_change`); nothing is written when
anything is refused.

No HTTP and no admin here: ``evaluation.api`` and
``evaluation.admin.add_to_dataset`` parse their input and call
:func:`examples_from_turns`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from django.db import transaction
from django.db.models import Q, QuerySet

from common.errors import BadInput, NotFound
from evaluation.datasets.names import dataset_name_check
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import dataset_change, examples_at
from evaluation.models import Dataset, Example
from evaluation.scoring.dispatch import check_scorer
from turns.models import Turn

if TYPE_CHECKING:
    from django.contrib.auth.models import User

#: Turns one change may add (the admin's form has two fields a turn, under
#: Django's ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` of 1,000).
MAX_TURNS = 200

#: ``Example.task_type``'s length.
MAX_TASK_TYPE = 64


class ConversationEntry(TypedDict):
    """One earlier turn of the conversation: its question and its answer
    (``""`` when it has none)."""

    question: str
    answer: str


class TurnExampleMetadata(TypedDict):
    """``Example.metadata`` of an example made from a turn."""

    source_turn: int
    conversation: list[ConversationEntry]


@dataclass(frozen=True)
class TurnPick:
    """One turn to add: ``gold`` is the gold answer staff gave (``None``: the
    turn's own answer); ``task_type`` the example's task type; ``scorer`` its
    scorer (``""``: by task type, ``evaluation.scoring.scorer_for``);
    ``trajectory`` its expected path (the example's ``metadata.trajectory``)."""

    turn_id: int
    task_type: str
    gold: str | None = None
    scorer: str = ""
    #: the expected trajectory staff kept (``[{"tool", "args"}, …]``, checked
    #: by ``evaluation.scoring.trajectory_spec``), ``None``: none
    trajectory: list[dict[str, Any]] | None = None


@dataclass
class TurnsAdded:
    """What :func:`examples_from_turns` (or ``examples_from_conversations``)
    did: the dataset, its latest version after the change (unchanged when
    nothing was added), the ``question_id`` of each example added, in order,
    the sources not added because they are already there (``duplicates``,
    their pks), whether the dataset was made by this change (``created``),
    and what a source is (``source``: ``turn`` or ``conversation``)."""

    dataset: Dataset
    version: int
    added: list[str] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    created: bool = False
    source: str = "turn"

    def summary(self) -> str:
        """``dataset NAME: version 3 — 2 added (turn-12, turn-15); already there, not added: turn 14``."""
        if self.added:
            head = (
                f"dataset {self.dataset.name}: version {self.version} — {len(self.added)} added "
                f"({', '.join(self.added)})"
            )
        else:
            head = f"dataset {self.dataset.name}: nothing added, still version {self.version}"
        if self.duplicates:
            head += f"; already there, not added: {self.source} " + ", ".join(map(str, self.duplicates))
        return head


class GoldMissing(BadInput):
    """Turns that would get an empty gold answer: ``rows`` maps each turn's
    pk to why (a turn with no answer needs one given; a blank one is refused)."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = rows
        super().__init__("; ".join(f"turn {pk}: {why}" for pk, why in rows.items()) + "; nothing done")


def turn_question_id(turn_id: int) -> str:
    """The ``question_id`` of the example made from turn ``turn_id``: ``turn-<pk>``."""
    return f"turn-{turn_id}"


def examples_from_turns(
    *,
    dataset_name: str,
    picks: Sequence[TurnPick],
    create: bool = False,
    user: User | None = None,
) -> TurnsAdded:
    """Add the turns of ``picks`` to dataset ``dataset_name`` as examples, in
    one new version; returns :class:`TurnsAdded`.

    ``create``: make the dataset (its version 1) when there is none by that
    name; otherwise an unknown name is ``NotFound``. Raises, writing nothing:
    ``NotFound`` naming unknown turns; ``GoldMissing`` for turns whose gold
    would be empty; ``BadInput`` for no picks, more than ``MAX_TURNS``, a turn
    given twice, a blank or too long task type, an unknown scorer, or a new
    name the dataset rules refuse. One transaction, the dataset row locked
    while duplicates are looked up and the version is made.
    """
    _check_picks(picks)
    turns = _turns([pick.turn_id for pick in picks])
    golds = _golds(picks, turns)
    histories = _conversations(turns.values())
    with transaction.atomic():
        dataset, created = dataset_for_change(dataset_name, create=create)
        taken = _taken(dataset, turns.values())
        specs, kept, duplicates = [], [], []
        for pick in picks:
            turn = turns[pick.turn_id]
            if taken.holds(turn):
                duplicates.append(turn.pk)
                continue
            taken.add(turn)
            kept.append(str(turn.pk))
            specs.append(_spec(turn, pick, golds[turn.pk], histories.get(turn.pk, [])))
        result = TurnsAdded(dataset=dataset, version=dataset.version, duplicates=duplicates, created=created)
        if specs:
            source = "chat turns " + ", ".join(kept)
            change = dataset_change(dataset, upserts=specs, source=source, user=user, first=created)
            result.version, result.added = dataset.version, change.added
    return result


def source_turn_of(metadata: Any) -> int | None:
    """The turn an example was made from (its ``metadata.source_turn``, an
    integer), or ``None``: not made from a turn, or a value that is no id."""
    source = metadata.get("source_turn") if isinstance(metadata, dict) else None
    return source if isinstance(source, int) and not isinstance(source, bool) else None


def turn_examples(*, turn: Turn, limit: int = 10) -> QuerySet[Example]:
    """The current examples, of any dataset, that hold ``turn``'s question
    (same text, or made from it: ``metadata.source_turn``), with their dataset,
    by dataset name; at most ``limit``. One query."""
    rows = Example.objects.filter(valid_to__isnull=True).filter(
        Q(question=turn.question) | Q(metadata__source_turn=turn.pk)
    )
    return rows.select_related("dataset").order_by("dataset__name", "position", "pk")[:limit]


def _check_picks(picks: Sequence[TurnPick]) -> None:
    if not picks:
        raise BadInput("choose at least one turn")
    if len(picks) > MAX_TURNS:
        raise BadInput(f"at most {MAX_TURNS} turns at a time, not {len(picks)}")
    seen: set[int] = set()
    for pick in picks:
        if pick.turn_id in seen:
            raise BadInput(f"turn {pick.turn_id} is given twice; nothing done")
        seen.add(pick.turn_id)
        if not pick.task_type.strip() or len(pick.task_type) > MAX_TASK_TYPE:
            raise BadInput(f"turn {pick.turn_id}: the task type must be 1 to {MAX_TASK_TYPE} characters")
        if pick.scorer:
            try:
                check_scorer(pick.scorer)
            except ValueError as exc:
                raise BadInput(f"turn {pick.turn_id}: {exc}") from None


def _turns(ids: list[int]) -> dict[int, Turn]:
    found = Turn.objects.only("pk", "question", "answer", "status", "conversation_id", "position").in_bulk(
        ids
    )
    missing = [pk for pk in ids if pk not in found]
    if missing:
        raise NotFound("no turn " + ", ".join(map(str, missing)))
    return found


def _golds(picks: Sequence[TurnPick], turns: dict[int, Turn]) -> dict[int, str]:
    """Each turn's gold answer: the one given, else the turn's answer; every
    empty one is collected into one ``GoldMissing``."""
    golds: dict[int, str] = {}
    problems: dict[int, str] = {}
    for pick in picks:
        turn = turns[pick.turn_id]
        gold = turn.answer if pick.gold is None else pick.gold
        if gold.strip():
            golds[turn.pk] = gold.strip()
        elif not turn.answer.strip():
            problems[turn.pk] = f"it has no answer ({turn.status}); give the gold answer"
        else:
            problems[turn.pk] = "the gold answer is empty; give one"
    if problems:
        raise GoldMissing(problems)
    return golds


def _conversations(turns: Iterable[Turn]) -> dict[int, list[ConversationEntry]]:
    """For each turn in a conversation, the turns before it there (by
    position, then pk), oldest first. One query."""
    chosen = [turn for turn in turns if turn.conversation_id is not None]
    if not chosen:
        return {}
    rows = (
        Turn.objects.filter(conversation_id__in={turn.conversation_id for turn in chosen})
        .order_by("conversation_id", "position", "pk")
        .values_list("conversation_id", "position", "pk", "question", "answer")
    )
    by_conversation: dict[int, list[tuple[int, int, str, str]]] = {}
    for conversation_id, position, pk, question, answer in rows:
        by_conversation.setdefault(conversation_id, []).append((position, pk, question, answer))
    return {
        turn.pk: [
            ConversationEntry(question=question, answer=answer)
            for position, pk, question, answer in by_conversation.get(turn.conversation_id or 0, [])
            if (position, pk) < (turn.position, turn.pk)
        ]
        for turn in chosen
    }


def dataset_for_change(name: str, *, create: bool) -> tuple[Dataset, bool]:
    """The dataset named ``name``, locked, and whether it was just made
    (``create``: made when missing, else ``NotFound``; a name the rules
    refuse is ``BadInput``). Call it inside the change's transaction."""
    name = (name or "").strip()
    found = Dataset.objects.select_for_update().filter(name=name).first()
    if found is not None:
        return found, False
    name = dataset_name_check(name)  # a name no dataset may have is 400, not 404
    if not create:
        raise NotFound(f"no dataset named {name!r} (ask to create it to make a new one)")
    # get_or_create: a dataset made by someone else meanwhile is used, not an IntegrityError
    dataset, created = Dataset.objects.get_or_create(name=name, defaults={"source": "chat turns"})
    if not created:
        dataset = Dataset.objects.select_for_update().get(pk=dataset.pk)
    return dataset, created


@dataclass
class _Taken:
    """What the dataset's current version already holds, grown as turns are added."""

    questions: set[str]
    source_turns: set[int]
    ids: set[str]

    def holds(self, turn: Turn) -> bool:
        return (
            turn.question in self.questions
            or turn.pk in self.source_turns
            or turn_question_id(turn.pk) in self.ids
        )

    def add(self, turn: Turn) -> None:
        self.questions.add(turn.question)
        self.source_turns.add(turn.pk)
        self.ids.add(turn_question_id(turn.pk))


def _taken(dataset: Dataset, turns: Iterable[Turn]) -> _Taken:
    """The current examples of ``dataset`` any of ``turns`` would duplicate. One query."""
    turns = list(turns)
    pks = [turn.pk for turn in turns]
    rows = examples_at(dataset).filter(
        Q(question__in={turn.question for turn in turns})
        | Q(metadata__source_turn__in=pks)
        | Q(external_id__in=[turn_question_id(pk) for pk in pks])
    )
    taken = _Taken(set(), set(), set())
    for question, metadata, external_id in rows.values_list("question", "metadata", "external_id"):
        taken.questions.add(question)
        taken.ids.add(external_id)
        source = source_turn_of(metadata)
        if source is not None:
            taken.source_turns.add(source)
    return taken


def _spec(turn: Turn, pick: TurnPick, gold: str, history: list[ConversationEntry]) -> ExampleSpec:
    metadata: dict[str, Any] = dict(TurnExampleMetadata(source_turn=turn.pk, conversation=history))
    if pick.trajectory is not None:
        metadata["trajectory"] = pick.trajectory
    return ExampleSpec(
        external_id=turn_question_id(turn.pk),
        question=turn.question,
        answer=gold,
        task_type=pick.task_type.strip(),
        scorer=pick.scorer or None,
        metadata=metadata,
    )
