"""Before a run: every scorer its examples name is known, and every plugin
scorer among them loads (``agentlab_scorers``, docs/extending.md).

A dataset's or an example's ``scorer`` may name a plugin's scorer; it is
looked up here once per distinct example scorer and plugin list, so an
unknown name or a plugin scorer that does not load is ``BadInput`` (exit 2)
before the run is written — not a failure of every prediction.
"""

from __future__ import annotations

from typing import Any

from agentlab.agent.plugins import PluginError
from common.errors import BadInput
from evaluation.models import Dataset, Example
from evaluation.run.record import scorer_plugins, scorers_of_plugins
from evaluation.scoring.dispatch import scorer_for


def scorers_snapshot(dataset: Dataset) -> dict[str, Any]:
    """``{"scorer_plugins": [{"scorer", "plugin", "target", "distribution",
    "version"}, ...]}`` — the plugin scorers the examples of ``dataset`` are
    scored by, for the run's config (``{}`` when none is). Raises
    ``BadInput`` naming the example (its ``external_id``) whose scorer is
    unknown, or the plugin that does not load."""
    used: dict[str, dict[str, Any]] = {}
    # one example per (scorer, task type): the first of each, found here rather
    # than by DISTINCT ON, which only PostgreSQL has (the embedded default is SQLite)
    first: dict[tuple[str, str], int] = {}
    rows = Example.objects.filter(dataset=dataset).order_by("pk").values_list("pk", "scorer", "task_type")
    for pk, scorer, task_type in rows.iterator() if dataset.pk else ():
        first.setdefault((scorer, task_type), pk)
    kinds = (
        Example.objects.filter(pk__in=first.values())
        .order_by("scorer", "task_type")
        .select_related("dataset")
    )
    for example in kinds:
        for plugins in _plugin_lists(dataset, example.scorer, example.task_type):
            example.plugins = list(plugins)
            try:
                found = scorers_of_plugins(scorer_plugins(example))
                name = scorer_for(
                    example_scorer=example.scorer or None,
                    task_type=example.task_type,
                    dataset_scorer=dataset.scorer or None,
                    extra=found,
                )
            except PluginError as exc:
                raise BadInput(f"dataset {dataset.name!r}: a plugin scorer does not load: {exc}") from None
            except ValueError as exc:
                raise BadInput(f"dataset {dataset.name!r}, example {example.external_id!r}: {exc}") from None
            if name in found:
                used[name] = found[name].describe()
    return {"scorer_plugins": list(used.values())} if used else {}


def _plugin_lists(dataset: Dataset, scorer: str, task_type: str) -> list[tuple[str, ...]]:
    lists = (
        Example.objects.filter(dataset=dataset, scorer=scorer, task_type=task_type)
        .values_list("plugins", flat=True)
        .distinct()
    )
    return [tuple(p or ()) for p in lists] or [()]
