"""Dataset versions: every change to a dataset's examples makes the next
version, and nothing stored is rewritten (docs/architecture.md#dataset-versions).

An example row holds one content of one ``question_id`` (``external_id``)
and the versions it is valid in: from ``valid_from`` up to, not including,
``valid_to`` (``None``: current). A change closes the rows it changes or
removes (one ``UPDATE`` of ``valid_to``) and inserts the new contents; the
examples it leaves alone are shared by both versions. A one-example edit of
a 100,000-example dataset thus writes two example rows, one version row and
the dataset's ``version``.

The same idea is a temporal (valid-time) table, e.g. SQL:2011's
``PERIOD FOR``; LangSmith and Langfuse version their datasets on every change
in the same spirit.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.db.models import Max, Q, QuerySet

from common.errors import BadInput, StateConflict
from evaluation.datasets.names import DEMO_DATASET_NAME
from evaluation.datasets.spec import ExampleSpec
from evaluation.models import Dataset, DatasetVersion, Example

if TYPE_CHECKING:
    from django.contrib.auth.models import User

#: The example fields whose difference makes a new content of an example
#: (its position alone does not: reordering a file is not a change).
CONTENT_FIELDS = ("question", "answer", "task_type", "scorer", "choices", "context", "metadata", "plugins")

#: Rows per ``UPDATE … WHERE pk IN`` (SQLite's bound on query parameters).
_BATCH = 500

_REF = re.compile(r"^(?P<name>.+)@(?P<version>[^@]*)$")


def in_version(version: int | None) -> Q:
    """The example rows valid in dataset version ``version`` (``None``: the latest)."""
    if version is None:
        return Q(valid_to__isnull=True)
    return (Q(valid_to__isnull=True) | Q(valid_to__gt=version)) & Q(valid_from__lte=version)


def examples_at(dataset: Dataset | int, version: int | None = None) -> QuerySet[Example]:
    """The examples of ``dataset`` (a row or its pk) in ``version`` (``None``:
    the latest), in the dataset's order (``position``, then pk)."""
    dataset_id = dataset if isinstance(dataset, int) else dataset.pk
    return Example.objects.filter(in_version(version), dataset_id=dataset_id).order_by("position", "pk")


def example_content(spec: ExampleSpec) -> dict[str, Any]:
    """The ``CONTENT_FIELDS`` of ``spec`` as they are stored."""
    return {
        "question": spec.question,
        "answer": spec.answer,
        "task_type": spec.task_type,
        "scorer": spec.scorer or "",
        "choices": spec.choices,
        "context": spec.context or {},
        "metadata": spec.metadata or {},
        "plugins": list(spec.plugins),
    }


def example_spec(example: Example) -> ExampleSpec:
    """An example row back as an ``ExampleSpec`` (what an export writes)."""
    return ExampleSpec(
        external_id=example.external_id,
        question=example.question,
        answer=example.answer,
        task_type=example.task_type,
        scorer=example.scorer or None,
        choices=example.choices,
        context=example.context or None,
        metadata=dict(example.metadata or {}),
        plugins=tuple(example.plugins or ()),
    )


@dataclass
class VersionChange:
    """What a change did: the version it made (``number`` ``None``: nothing
    differed, no version was made) and the ``question_id`` s it added,
    changed and removed; ``total``: examples in the resulting version."""

    dataset: Dataset
    number: int | None
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    total: int = 0

    def summary(self) -> str:
        """``dataset NAME: version 2 — 3 added, 1 changed, 0 removed`` (or the no-op line)."""
        examples = f"{self.total} example{'' if self.total == 1 else 's'}"
        if self.number is None:
            return (
                f"dataset {self.dataset.name}: unchanged, still version {self.dataset.version} ({examples})"
            )
        return (
            f"dataset {self.dataset.name}: version {self.number} — {len(self.added)} added, "
            f"{len(self.changed)} changed, {len(self.removed)} removed ({examples})"
        )


def dataset_change(
    dataset: Dataset,
    *,
    upserts: Sequence[ExampleSpec] = (),
    remove: Collection[str] = (),
    replace: bool = False,
    source: str = "",
    user: User | None = None,
    first: bool = False,
) -> VersionChange:
    """Make the next version of ``dataset`` from a change of its examples.

    ``upserts``: examples to add, or to change when their ``question_id`` is
    current with other content (``CONTENT_FIELDS``); ``remove``: ids to
    remove (each must be current); ``replace``: the upserts are the whole
    new version (an import) — current examples not among them are removed,
    and each keeps the position it has in ``upserts``; otherwise new examples
    go after the last. ``first``: the dataset was just created (its version 1).

    Returns the :class:`VersionChange`; when nothing differs no version is
    made. Raises ``BadInput`` — writing nothing — for an id to remove that is
    not current, a change that would leave the dataset empty, a
    ``question_id`` twice in ``upserts``, or any change to the project's demo
    dataset after its first version (the demo is code's, and ``make demo``
    must measure the same eight examples everywhere). Runs in one
    transaction with the dataset row locked, so two changes at once make two
    versions in turn; where the lock is a no-op (SQLite) the second of two
    simultaneous changes raises ``StateConflict`` and writes nothing.
    """
    try:
        with transaction.atomic():
            locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
            current = _current(locked, None if replace else [s.external_id for s in upserts] + list(remove))
            plan = _Plan.of(current, upserts, remove=remove, replace=replace)
            before = 0 if first else len(current) if replace else examples_at(locked).count()
            total = before + len(plan.added) - len(plan.removed)
            change = VersionChange(dataset=locked, number=None, total=total)
            if plan.added or plan.changed or plan.removed or first:
                _check(locked, total=total, first=first)
                number = 1 if first else locked.version + 1
                _write(locked, plan, current, number=number, replace=replace)
                DatasetVersion.objects.create(
                    dataset=locked,
                    number=number,
                    source=source[:500],
                    created_by=user,
                    added=len(plan.added),
                    changed=len(plan.changed),
                    removed=len(plan.removed),
                    total=total,
                )
                Dataset.objects.filter(pk=locked.pk).update(version=number)
                locked.version = change.number = number
                change.added, change.changed, change.removed = plan.added, plan.changed, plan.removed
            dataset.version = locked.version
            return change
    except IntegrityError as exc:
        # two changes at once where the row lock cannot serialise them (SQLite):
        # the second made the same version number
        raise StateConflict(
            f"dataset {dataset.name!r} was changed by someone else at the same moment; nothing was "
            "written — try again"
        ) from exc


def _check(dataset: Dataset, *, total: int, first: bool) -> None:
    """``BadInput`` for a change of the demo dataset or one that empties ``dataset``."""
    if dataset.name == DEMO_DATASET_NAME and not first:
        raise BadInput(
            f"dataset {DEMO_DATASET_NAME!r} is the project's own demo and does not change; export it "
            "(manage.py export_dataset demo --out FILE.jsonl) and import the copy under another name"
        )
    if total <= 0:
        raise BadInput(f"dataset {dataset.name!r}: this change would leave it with no examples; nothing done")


def _write(dataset: Dataset, plan: _Plan, current: _Current, *, number: int, replace: bool) -> None:
    """Close the rows ``plan`` changes or removes and insert its new
    contents, valid from version ``number``."""
    closing = [current[i][0] for i in plan.changed + plan.removed]
    for start in range(0, len(closing), _BATCH):
        Example.objects.filter(pk__in=closing[start : start + _BATCH]).update(valid_to=number)
    next_position = _next_position(dataset, replace=replace)
    rows = [
        Example(
            dataset=dataset,
            external_id=spec.external_id,
            # an import's file order; a changed example keeps its place; a new one goes last
            position=index if replace else current.get(spec.external_id, (0, next_position + index))[1],
            valid_from=number,
            **example_content(spec),
        )
        for index, spec in plan.written
    ]
    Example.objects.bulk_create(rows, batch_size=_BATCH)


#: (pk, position, content) of a current example, by ``question_id``
_Current = dict[str, tuple[int, int, dict[str, Any]]]


def _current(dataset: Dataset, ids: Iterable[str] | None) -> _Current:
    """The current rows of ``dataset`` — all, or only those with one of ``ids``."""
    rows = examples_at(dataset).values_list("external_id", "pk", "position", *CONTENT_FIELDS)
    found: _Current = {}
    if ids is None:
        batches: Iterable[QuerySet[Any]] = [rows]
    else:
        wanted = sorted(set(ids))
        batches = (rows.filter(external_id__in=wanted[i : i + _BATCH]) for i in range(0, len(wanted), _BATCH))
    for batch in batches:
        for external_id, pk, position, *content in batch.iterator(chunk_size=2000):
            found[external_id] = (pk, position, dict(zip(CONTENT_FIELDS, content, strict=True)))
    return found


def _next_position(dataset: Dataset, *, replace: bool) -> int:
    if replace:
        return 0
    last = Example.objects.filter(dataset=dataset).aggregate(last=Max("position"))["last"]
    return 0 if last is None else last + 1


@dataclass
class _Plan:
    """The ids a change adds, changes and removes, and the specs to write
    (with their index in ``upserts``)."""

    added: list[str]
    changed: list[str]
    removed: list[str]
    written: list[tuple[int, ExampleSpec]]

    @classmethod
    def of(
        cls, current: _Current, upserts: Sequence[ExampleSpec], *, remove: Collection[str], replace: bool
    ) -> _Plan:
        plan = cls([], [], [], [])
        seen: set[str] = set()
        for index, spec in enumerate(upserts):
            if spec.external_id in seen:
                raise BadInput(f"question_id {spec.external_id!r} is given twice; nothing done")
            seen.add(spec.external_id)
            row = current.get(spec.external_id)
            if row is None:
                plan.added.append(spec.external_id)
            elif row[2] != example_content(spec):
                plan.changed.append(spec.external_id)
            else:
                continue
            plan.written.append((index, spec))
        missing = sorted(set(remove) - set(current))
        if missing:
            listed = ", ".join(map(repr, missing[:5]))
            raise BadInput(f"no current example with question_id {listed}; nothing done")
        gone = set(remove) | ({i for i in current if i not in seen} if replace else set())
        plan.removed = [i for i in current if i in gone and i not in seen]
        return plan


def examples_differ(dataset: Dataset, examples: Sequence[ExampleSpec]) -> bool:
    """Whether ``examples`` as a whole new version of ``dataset`` would change
    anything (the comparison ``dataset_change`` makes, without writing).
    ``BadInput`` for a ``question_id`` twice in ``examples``."""
    plan = _Plan.of(_current(dataset, None), examples, remove=(), replace=True)
    return bool(plan.added or plan.changed or plan.removed)


def versions_compared(dataset_id: int, base: int, candidate: int) -> dict[str, int]:
    """How version ``candidate`` of a dataset differs from version ``base``:
    ``{"added", "changed", "removed"}`` example counts (changed: another row,
    so another content, of the same ``question_id``). Two queries."""
    before = dict(examples_at(dataset_id, base).values_list("external_id", "pk"))
    after = dict(examples_at(dataset_id, candidate).values_list("external_id", "pk"))
    return {
        "added": len(after.keys() - before.keys()),
        "changed": sum(1 for key in after.keys() & before.keys() if after[key] != before[key]),
        "removed": len(before.keys() - after.keys()),
    }


@dataclass(frozen=True)
class DatasetRef:
    """A dataset with the version asked for (``version`` ``None``: the latest)."""

    dataset: Dataset
    version: int | None

    @property
    def number(self) -> int:
        """The version number meant: the one asked for, else the latest."""
        return self.version if self.version is not None else self.dataset.version


def dataset_ref(raw: str) -> tuple[str, int | None] | None:
    """``NAME@VERSION`` split into ``(NAME, VERSION)``; ``None`` when ``raw``
    has no ``@``. Raises ``BadInput`` for a malformed version (``NAME@``,
    ``NAME@x``, ``NAME@0``)."""
    match = _REF.match(raw)
    if match is None:
        return None
    version = match["version"]
    if not (version.isascii() and version.isdigit()) or len(version) > 9 or int(version) < 1:
        raise BadInput(
            f"{raw!r}: the version after @ must be a whole number from 1 to 999999999 "
            f"(as in {match['name']}@2)"
        )
    return match["name"], int(version)


def version_check(dataset: Dataset, version: int | None) -> None:
    """``BadInput`` unless ``version`` (``None``: the latest) is one of ``dataset``'s."""
    if version is not None and not 1 <= version <= dataset.version:
        have = "version 1" if dataset.version == 1 else f"versions 1–{dataset.version}"
        raise BadInput(f"dataset {dataset.name!r} has {have}; there is no version {version}")


@dataclass(frozen=True)
class VersionDiff:
    """The ``question_id`` s a version added, changed and removed, against the one before."""

    added: list[str]
    changed: list[str]
    removed: list[str]


def version_diff(dataset: Dataset, number: int) -> VersionDiff:
    """What version ``number`` of ``dataset`` changed, read from the example
    rows themselves: a row that starts at ``number`` is an addition, or a
    change when a row of the same id ends there; a row that ends there with
    no successor is a removal. Two queries."""
    started = list(
        Example.objects.filter(dataset=dataset, valid_from=number)
        .order_by("position", "pk")
        .values_list("external_id", flat=True)
    )
    ended = set(
        Example.objects.filter(dataset=dataset, valid_to=number).values_list("external_id", flat=True)
    )
    return VersionDiff(
        added=[i for i in started if i not in ended],
        changed=[i for i in started if i in ended],
        removed=sorted(ended - set(started)),
    )


def example_history(example: Example) -> QuerySet[Example]:
    """Every content example ``example.external_id`` has had in its dataset,
    oldest first (``valid_from``)."""
    return Example.objects.filter(dataset_id=example.dataset_id, external_id=example.external_id).order_by(
        "valid_from"
    )
