"""Writes on datasets: register examples under a name, resolve what ``run_eval`` was asked for."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from django.db import transaction

from agentlab.agent.plugins import PluginError, load_plugin
from common.errors import BadInput
from evaluation.datasets.demo import DEMO_DATASET_NAME, demo_examples
from evaluation.datasets.jsonl import parse_jsonl
from evaluation.datasets.spec import ExampleSpec
from evaluation.models import Dataset, Example
from evaluation.scoring.dispatch import DEFAULT_SCORER_BY_TASK_TYPE, FALLBACK_SCORER, check_scorer, scorer_for

#: ``Dataset.source`` of the demo dataset, the only import allowed under its name.
DEMO_SOURCE = "agentlab demo"

#: Characters a dataset name may not hold (run ids are made from it; both appear in URLs).
_NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\\?#%]")


def dataset_import(
    *,
    name: str,
    examples: Sequence[ExampleSpec],
    source: str = "",
    plugins: Sequence[str] = (),
    scorer: str | None = None,
    rubric: str | None = None,
) -> Dataset:
    """Register ``examples`` under dataset ``name``, in one transaction.

    ``scorer``: the dataset's default scorer (examples that name none get it
    instead of their task type's; ``"judge"`` asks the LLM judge), ``rubric``:
    the judge's rubric for the dataset; ``None`` keeps what the dataset has
    (``""`` clears it). ``ValueError`` names an unknown scorer.

    ``plugins``: entry-point plugins every run of the dataset switches on
    (``import_dataset --plugin``), each checked to load (``BadInput``
    otherwise); an example's own ``plugins`` come from its line.

    Importing the same examples again under the same name is a no-op, so
    runs that refer to them stay valid. A name that already holds *different*
    examples is refused (``BadInput``): silently merging two files that share
    a name (two ``test.jsonl`` files, or a file called like a registered
    dataset) would change what earlier runs measured. Raises ``BadInput`` for
    an empty name or no examples too; nothing is written then.
    """
    name = _dataset_name(name, source=source)
    if not examples:
        raise BadInput(f"dataset {name!r} has no examples")
    plugin_names = _dataset_plugins(plugins)
    if scorer:
        check_scorer(scorer)
    for spec in examples:  # fail before writing anything
        scorer_for(example_scorer=spec.scorer, task_type=spec.task_type)
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
        new, same = _new_examples(dataset, examples)
        if not created and not same:
            raise BadInput(
                f"a dataset named {name!r} already exists with different examples"
                + (f" (from {dataset.source})" if dataset.source else "")
                + "; import this file under another name: manage.py import_dataset FILE --name NEW_NAME"
            )
        Example.objects.bulk_create(new, batch_size=500)
        scoring = {k: v for k, v in (("scorer", scorer), ("rubric", rubric)) if v is not None}
        if scoring:
            Dataset.objects.filter(pk=dataset.pk).update(**scoring)
            for k, v in scoring.items():
                setattr(dataset, k, v)
    return dataset


def _dataset_name(name: str, *, source: str) -> str:
    """``name`` stripped: not empty, not the demo's (unless this is the
    demo), none of the characters a URL cannot hold. ``BadInput`` otherwise."""
    name = (name or "").strip()
    if not name:
        raise BadInput("a dataset needs a non-empty name")
    if name == DEMO_DATASET_NAME and source != DEMO_SOURCE:
        raise BadInput(
            f"dataset name {name!r} is reserved for the project's demo dataset; choose another name"
        )
    bad = _NAME_FORBIDDEN.search(name)
    if bad:
        # run ids are made from dataset names, and both appear in URLs
        raise BadInput(
            f"dataset name {name!r} contains {bad.group()!r}; control characters and / \\ ? # % "
            "are not allowed"
        )
    return name


def _dataset_plugins(plugins: Sequence[str]) -> list[str]:
    """The plugin names, stripped and without repeats, each checked to load."""
    plugin_names = list(dict.fromkeys(p.strip() for p in plugins if p.strip()))
    for plugin in plugin_names:
        try:
            load_plugin(plugin)
        except PluginError as exc:
            raise BadInput(f"--plugin {plugin}: {exc}") from None
    return plugin_names


def _new_examples(dataset: Dataset, examples: Sequence[ExampleSpec]) -> tuple[list[Example], bool]:
    """The rows ``examples`` add to ``dataset``, and whether the dataset's
    examples are exactly ``examples`` already (same ids, same values)."""
    existing = {e.external_id: e for e in dataset.examples.all()}
    new: list[Example] = []
    changed = False
    for position, spec in enumerate(examples):
        values = {
            "position": position,
            "question": spec.question,
            "answer": spec.answer,
            "task_type": spec.task_type,
            "scorer": spec.scorer or "",
            "choices": spec.choices,
            "context": spec.context or {},
            "metadata": spec.metadata or {},
            "plugins": list(spec.plugins),
        }
        row = existing.get(spec.external_id)
        if row is None:
            new.append(Example(dataset=dataset, external_id=spec.external_id, **values))
        elif any(getattr(row, k) != v for k, v in values.items()):
            changed = True
    return new, not (new or changed or len(existing) != len(examples))


def dataset_resolve(*, name_or_path: str) -> Dataset:
    """The dataset ``run_eval`` was asked for.

    A registered dataset name wins; ``demo`` registers the project's demo
    dataset on first use; a path to a ``.jsonl`` file is parsed (the whole file
    is validated first — ``DatasetFormatError`` names the line) and registered
    under the file's stem. Raises ``BadInput`` for anything else.
    """
    found = Dataset.objects.filter(name=name_or_path).first()
    if found is not None:
        return found
    if name_or_path == DEMO_DATASET_NAME:
        return dataset_import(name=DEMO_DATASET_NAME, examples=demo_examples(), source=DEMO_SOURCE)
    path = Path(name_or_path)
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise BadInput(f"dataset file {name_or_path} does not exist")
        examples = parse_jsonl(path)
        return dataset_import(name=path.stem, examples=examples, source=str(path.resolve()))
    known = sorted(Dataset.objects.exclude(name=DEMO_DATASET_NAME).values_list("name", flat=True))
    raise BadInput(
        f"no dataset named {name_or_path!r} and no such .jsonl file; registered datasets: "
        + (", ".join(known) if known else "none")
        + f" (and {DEMO_DATASET_NAME!r})"
    )


def dataset_fallback_task_types(*, dataset: Dataset) -> list[str]:
    """Task types (sorted) of ``dataset``'s examples that name no scorer and
    whose task type has no default in ``DEFAULT_SCORER_BY_TASK_TYPE``: they
    are scored with ``FALLBACK_SCORER`` (exact match), which a typo such as
    ``"maths"`` would make silently wrong for numbers. One query."""
    found = dataset.examples.filter(scorer="").values_list("task_type", flat=True).distinct()
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
