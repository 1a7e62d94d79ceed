"""Writes on datasets: register examples under a name, resolve what ``run_eval`` was asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from agentlab.agent.plugins import PluginError, load_plugin
from common.errors import BadInput
from evaluation.datasets.demo import DEMO_DATASET_NAME, demo_examples
from evaluation.datasets.jsonl import parse_jsonl
from evaluation.datasets.names import DEMO_SOURCE, dataset_name_check
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import (
    DatasetRef,
    VersionChange,
    dataset_change,
    dataset_ref,
    examples_at,
    examples_differ,
    version_check,
)
from evaluation.models import Dataset
from evaluation.scoring.dispatch import (
    DEFAULT_SCORER_BY_TASK_TYPE,
    FALLBACK_SCORER,
    KNOWN_SCORERS,
    check_scorer,
    scorer_for,
)
from evaluation.scoring.plugin_scorers import plugin_scorers

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _plugin_scorer_names(plugins: Sequence[str]) -> frozenset[str]:
    """The names of the scorers of ``AGENTLAB_PLUGINS`` and ``plugins``
    (``agentlab_scorers``); ``BadInput`` when one of them does not load."""
    try:
        return frozenset(plugin_scorers([*settings.AGENTLAB_PLUGINS, *plugins], reserved=KNOWN_SCORERS))
    except PluginError as exc:
        raise BadInput(f"a plugin scorer does not load: {exc}") from None


def dataset_import(**options: Any) -> Dataset:
    """``dataset_import_version(**options).dataset``: the registered dataset."""
    return dataset_import_version(**options).dataset


def dataset_import_version(
    *,
    name: str,
    examples: Sequence[ExampleSpec],
    source: str = "",
    plugins: Sequence[str] = (),
    scorer: str | None = None,
    rubric: str | None = None,
    new_version: bool = False,
    user: User | None = None,
) -> VersionChange:
    """Register ``examples`` under dataset ``name``, in one transaction, and
    say what changed (``VersionChange``; its ``dataset``).

    ``scorer``: the dataset's default scorer (examples that name none get it
    instead of their task type's; ``"judge"`` asks the LLM judge), ``rubric``:
    the judge's rubric for the dataset; ``None`` keeps what the dataset has
    (``""`` clears it). ``ValueError`` names an unknown scorer.

    ``plugins``: entry-point plugins every run of the dataset switches on
    (``import_dataset --plugin``), each checked to load (``BadInput``
    otherwise); an example's own ``plugins`` come from its line.

    A new name makes version 1. Importing the same examples again is a
    no-op. A name that holds *different* examples gets its next version
    (``evaluation.datasets.versions``) when ``new_version`` (``import_dataset``
    names the dataset on purpose); otherwise it is refused (``BadInput``):
    ``run_eval FILE`` registers a file under its stem, and two unrelated
    ``test.jsonl`` files must not become versions of each other. Raises
    ``BadInput`` for an empty name, a name with ``@``, or no examples too;
    nothing is written then.
    """
    name = dataset_name_check(name, source=source)
    if not examples:
        raise BadInput(f"dataset {name!r} has no examples")
    plugin_names = _dataset_plugins(plugins)
    if scorer:
        check_scorer(scorer, _plugin_scorer_names(plugin_names))
    for spec in examples:  # fail before writing anything
        extra = _plugin_scorer_names([*plugin_names, *spec.plugins]) if spec.scorer else ()
        scorer_for(example_scorer=spec.scorer, task_type=spec.task_type, extra=extra)
    with transaction.atomic():
        dataset, created = Dataset.objects.get_or_create(
            name=name, defaults={"source": source, "plugins": plugin_names}
        )
        if not created and list(dataset.plugins or []) != plugin_names:
            raise BadInput(
                f"a dataset named {name!r} already exists with plugins {list(dataset.plugins or [])}, "
                f"not {plugin_names}; import this file under another name: "
                "manage.py import_dataset FILE --name NEW_NAME"
            )
        if created or new_version:
            change = dataset_change(
                dataset, upserts=examples, replace=True, source=f"import {source}", user=user, first=created
            )
        elif examples_differ(dataset, examples):
            raise BadInput(
                f"a dataset named {name!r} already exists with different examples"
                + (f" (from {dataset.source})" if dataset.source else "")
                + f"; make them its next version with manage.py import_dataset FILE --name {name}, "
                "or import this file under another name: manage.py import_dataset FILE --name NEW_NAME"
            )
        else:  # the same examples again: nothing to write
            change = VersionChange(dataset=dataset, number=None, total=len(examples))
        scoring = {k: v for k, v in (("scorer", scorer), ("rubric", rubric)) if v is not None}
        if scoring:
            Dataset.objects.filter(pk=dataset.pk).update(**scoring)
            for k, v in scoring.items():
                setattr(dataset, k, v)
        change.dataset = dataset
    return change


def _dataset_plugins(plugins: Sequence[str]) -> list[str]:
    """The plugin names, stripped and without repeats, each checked to load."""
    plugin_names = list(dict.fromkeys(p.strip() for p in plugins if p.strip()))
    for plugin in plugin_names:
        try:
            load_plugin(plugin)
        except PluginError as exc:
            raise BadInput(f"--plugin {plugin}: {exc}") from None
    return plugin_names


def dataset_resolve(*, name_or_path: str) -> Dataset:
    """``dataset_resolve_ref(name_or_path=…).dataset``."""
    return dataset_resolve_ref(name_or_path=name_or_path).dataset


def dataset_resolve_ref(*, name_or_path: str) -> DatasetRef:
    """The dataset, and version, ``run_eval`` was asked for.

    A registered dataset name wins (its latest version); ``NAME@VERSION``
    names a version of a registered dataset; ``demo`` registers the
    project's demo dataset on first use; a path to a ``.jsonl`` file is
    parsed (the whole file is validated first — ``DatasetFormatError`` names
    the line) and registered under the file's stem. Raises ``BadInput`` for
    anything else: an unknown name, a malformed or unknown version.
    """
    found = Dataset.objects.filter(name=name_or_path).first()
    if found is not None:
        return DatasetRef(found, None)
    if name_or_path == DEMO_DATASET_NAME:
        change = dataset_import_version(name=DEMO_DATASET_NAME, examples=demo_examples(), source=DEMO_SOURCE)
        return DatasetRef(change.dataset, None)
    path = Path(name_or_path)
    if path.suffix.lower() == ".csv":
        raise BadInput(
            f"{name_or_path}: run_eval reads a registered dataset or a .jsonl file; import a CSV first "
            "(manage.py import_dataset FILE.csv --name NAME), then run_eval NAME"
        )
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise BadInput(f"dataset file {name_or_path} does not exist")
        examples = parse_jsonl(path)
        change = dataset_import_version(name=path.stem, examples=examples, source=str(path.resolve()))
        return DatasetRef(change.dataset, None)
    ref = dataset_ref(name_or_path)
    if ref is not None:
        found = Dataset.objects.filter(name=ref[0]).first()
        if found is not None:
            version_check(found, ref[1])
            return DatasetRef(found, ref[1])
    known = sorted(Dataset.objects.exclude(name=DEMO_DATASET_NAME).values_list("name", flat=True))
    raise BadInput(
        f"no dataset named {(ref or (name_or_path,))[0]!r} and no such .jsonl file; registered datasets: "
        + (", ".join(known) + f" and {DEMO_DATASET_NAME!r}" if known else f"only {DEMO_DATASET_NAME!r}")
    )


def dataset_fallback_task_types(*, dataset: Dataset) -> list[str]:
    """Task types (sorted) of ``dataset``'s examples that name no scorer and
    whose task type has no default in ``DEFAULT_SCORER_BY_TASK_TYPE``: they
    are scored with ``FALLBACK_SCORER`` (exact match), which a typo such as
    ``"maths"`` would make silently wrong for numbers. One query."""
    found = examples_at(dataset).filter(scorer="").values_list("task_type", flat=True).distinct()
    return sorted(set(found) - set(DEFAULT_SCORER_BY_TASK_TYPE))


def fallback_note(task_types: list[str]) -> str:
    """The warning ``import_dataset`` and ``run_eval`` print for
    ``dataset_fallback_task_types``; ``""`` when there are none."""
    if not task_types:
        return ""
    known = ", ".join(f"{t} → {s}" for t, s in DEFAULT_SCORER_BY_TASK_TYPE.items())
    return (
        f"note: task type(s) {', '.join(repr(t) for t in task_types)} have no scorer of their own, so their "
        f'examples are scored with {FALLBACK_SCORER!r}; known task types: {known}; or set "scorer" per '
        "example"
    )
