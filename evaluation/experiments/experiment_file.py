"""An experiment file (``manage.py run_experiment FILE.toml``), read with the
standard library's ``tomllib`` and checked whole before anything is written
(docs/architecture.md#experiments; the file's keys: docs/evaluating.md#experiments).

The file names the experiment, the dataset (``NAME`` or ``NAME@VERSION``),
the options every variant shares (``run_eval``'s: ``limit``,
``concurrency``, ``epochs``, ``max_steps``, ``review``, ``judge_model``,
``user_model``, ``user_temperature``, ``user_seed``, ``plugins``, ``celery``,
``queue``, ``max_in_flight``, ``price_in``, ``price_out``, ``fail_under``,
``split``, ``tags``), the ``baseline`` variant and ``alpha`` of
the gate and the leaderboard, and a list of ``[[variant]]`` tables, each with
a ``name`` and at least one override (``VARIANT_KEYS``).

A variant's run id is ``<experiment slug>.<variant slug>`` (``run_id_of``),
where a slug (``slug``) is the name in lower-case ASCII with every run of
other characters made one ``-``: it holds only ``a-z``, ``0-9`` and ``-``,
so it is safe in a URL path and a shell word unquoted, and the ``.`` between
the two is never part of either.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import BadInput
from evaluation.experiments.trajectory_ranking import rank_by_check

#: The shared keys and the type each must have (``float`` also takes an int).
SHARED_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "dataset": str,
    "baseline": str,
    "alpha": float,
    "limit": int,
    "concurrency": int,
    "epochs": int,
    "max_steps": int,
    "review": bool,
    "judge_model": str,
    # the simulated user (docs/evaluating.md#simulated-users): shared, so every
    # variant meets the same one
    "user_model": str,
    "user_temperature": float,
    "user_seed": int,
    "plugins": list,
    "celery": bool,
    "queue": str,
    "max_in_flight": int,
    "price_in": float,
    "price_out": float,
    "fail_under": float,
    # the LLM-call cache (docs/evaluating.md#caching-llm-calls): run_eval's --cache options
    "cache": bool,
    "cache_expiry": str,
    "cache_sampled": bool,
    "fail_on_check": list,
    # run_experiment --stop-when-decided (evaluation.experiments.stopping)
    "stop_when_decided": bool,
    "margin": float,
    "batch_size": int,
    "variant": list,
    # the leaderboard's order: "answer" or "trajectory" (evaluation.experiments.trajectory_ranking)
    "rank_by": str,
    # run_eval's --split and --tag (docs/evaluating.md#splits-and-tags): every variant on one subset
    "split": str,
    "tags": list,
}

#: A variant's keys besides ``name`` (its overrides) and their types.
VARIANT_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "base_url": str,
    "api_key_env": str,
    "system_prompt": str,
    "system_prompt_file": str,
    "plugins": list,
    "mcp": list,
    "review": bool,
    "max_steps": int,
    "max_output_tokens": int,
    "temperature": float,
    "price_in": float,
    "price_out": float,
}

#: Most characters of an experiment's or a variant's name.
MAX_NAME = 100


def slug(name: str) -> str:
    """``name`` as lower-case ASCII letters, digits and single ``-``: accents
    dropped (NFKD), every run of other characters one ``-``, none at the
    ends. ``"GPT-4o mini, review on"`` → ``"gpt-4o-mini-review-on"``; may be
    empty (a name with no ASCII letter or digit)."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")


def run_id_of(experiment: str, variant: str) -> str:
    """The run id of ``variant`` in ``experiment``: ``<slug>.<slug>``."""
    return f"{slug(experiment)}.{slug(variant)}"


@dataclass(frozen=True)
class VariantSpec:
    """One ``[[variant]]``: its ``name`` and ``options`` — the overrides as
    given, except that ``system_prompt_file`` is read into ``system_prompt``
    (so a changed file is a changed variant). ``api_key``: the value of the
    variable ``api_key_env`` names, read now and never stored."""

    name: str
    options: dict[str, Any]
    api_key: str | None = None

    @property
    def slug(self) -> str:
        return slug(self.name)


@dataclass(frozen=True)
class ExperimentSpec:
    """A checked experiment file: ``path`` as given, ``name``, ``dataset``
    (``NAME`` or ``NAME@V``), the ``shared`` options (the ``SHARED_KEYS``
    present, ``name``/``dataset``/``baseline``/``alpha``/``variant`` aside),
    ``baseline`` (a variant name, ``""``: none), ``alpha`` and the
    ``variants`` in the file's order."""

    path: str
    name: str
    dataset: str
    shared: dict[str, Any]
    variants: tuple[VariantSpec, ...]
    baseline: str = ""
    alpha: float = 0.05
    notes: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return slug(self.name)

    def run_id(self, variant: VariantSpec) -> str:
        """The run id of ``variant`` (``run_id_of``)."""
        return run_id_of(self.name, variant.name)

    def to_dict(self) -> dict[str, Any]:
        """What ``Experiment.spec`` stores (no key values)."""
        return {
            "dataset": self.dataset,
            "shared": self.shared,
            "variants": [{"name": v.name, **v.options} for v in self.variants],
            "baseline": self.baseline,
            "alpha": self.alpha,
        }


def experiment_spec(path: str | Path, *, environ: Mapping[str, str] | None = None) -> ExperimentSpec:
    """Read and check the experiment file at ``path``. ``environ``: where
        ``api_key_env`` is looked up (default ``os.environ``).

        Raises ``BadInput`` naming the file and the key: the file missing or not
        TOML, an unknown key (with the closest known one), a value of the wrong
        type, no ``name``/``dataset``/variant, a name without an ASCII letter or
        digit or longer than ``MAX_NAME``, two variants with one name (or one
        slug), a variant with no override, ``system_prompt`` with
        ``system_prompt_file`` or a prompt file that cannot be read,
        ``api_key_env`` without ``base_url`` or naming a variable that is not set,
        ``baseline`` naming no variant, ``alpha`` outside (0, 1), an unknown
        ``rank_by``, an empty string
    value, a name with a control character. The values of
        ``run_eval``'s own options are checked by ``eval_request`` after this.
    """
    where = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"{where}: cannot read the experiment file: {exc.strerror or exc}") from None
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{where}: not a TOML file: {exc}") from None
    _keys_check(document, SHARED_KEYS, where=where, what="top level")
    name = _name_check(document.get("name"), where=f"{where}: name")
    dataset = document.get("dataset")
    if not dataset or not dataset.strip():
        raise BadInput(
            f"{where}: dataset: the experiment needs a dataset (a registered NAME or NAME@VERSION)"
        )
    variants = variants_check(document.get("variant"), where=where, base=Path(path).parent, environ=environ)
    baseline = (document.get("baseline") or "").strip()
    if baseline and baseline not in {v.name for v in variants}:
        names = ", ".join(repr(v.name) for v in variants)
        raise BadInput(f"{where}: baseline {baseline!r} is not a variant's name (the variants: {names})")
    alpha = float(document.get("alpha", 0.05))
    if not 0 < alpha < 1:
        raise BadInput(f"{where}: alpha must be between 0 and 1 (exclusive), got {alpha}")
    rank_by_check(document.get("rank_by"), where=f"{where}: rank_by")
    skip = {"name", "dataset", "baseline", "alpha", "variant"}
    shared = {key: value for key, value in document.items() if key not in skip}
    return ExperimentSpec(
        path=where,
        name=name,
        dataset=dataset.strip(),
        shared=shared,
        variants=variants,
        baseline=baseline,
        alpha=alpha,
    )


def _keys_check(table: Mapping[str, Any], known: Mapping[str, Any], *, where: str, what: str) -> None:
    """Every key of ``table`` is known and of its type; raises ``BadInput``."""
    for key, value in table.items():
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"
            if key == "api_key":
                hint = (
                    " (the key itself never goes in the file: name its environment variable in api_key_env)"
                )
            raise BadInput(f"{where}: {what}: unknown key {key!r}{hint}")
        _type_check(value, known[key], where=f"{where}: {what}: {key}")
        if known[key] is str and key not in ("baseline", "name") and not value.strip():
            raise BadInput(f"{where}: {what}: {key} is empty (leave the key out for the default)")


def _type_check(value: Any, expected: type | tuple[type, ...], *, where: str) -> None:
    """``value`` has the ``expected`` type (a float key takes an int; a bool
    is not an int; a list holds strings, except ``variant``'s tables)."""
    if expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, expected)
    if ok and expected is list and not where.endswith(": variant"):
        ok = all(isinstance(item, str) for item in value)
    if not ok:
        wanted = {
            str: "a string",
            int: "an integer",
            float: "a number",
            bool: "true or false",
            list: "a list of strings",
        }.get(expected if isinstance(expected, type) else str, "another type")
        if where.endswith(": variant"):
            wanted = "[[variant]] tables"
        raise BadInput(f"{where}: expected {wanted}, got {value!r}")


def _name_check(value: Any, *, where: str) -> str:
    """A name with a non-empty slug, at most ``MAX_NAME`` characters."""
    name = (value or "").strip() if isinstance(value, str) else ""
    if not name:
        raise BadInput(f"{where}: a name is required")
    if len(name) > MAX_NAME:
        raise BadInput(f"{where}: {name[:20]!r}… has {len(name)} characters; at most {MAX_NAME}")
    if re.search(r"[\x00-\x1f\x7f]", name):
        raise BadInput(f"{where}: {name!r} holds a control character (a tab, a newline, …)")
    if not slug(name):
        raise BadInput(
            f"{where}: {name!r} needs at least one ASCII letter or digit (run ids are made from it)"
        )
    return name


def variants_check(
    tables: Any, *, where: str, base: Path, environ: Mapping[str, str] | None
) -> tuple[VariantSpec, ...]:
    """The ``[[variant]]`` tables (a list of dicts as ``tomllib`` reads them),
    checked as ``experiment_spec`` says, as ``VariantSpec`` in their order;
    ``base``: the folder a ``system_prompt_file`` is read from. Raises
    ``BadInput`` starting with ``where``. Also the side-by-side page's
    (``evaluation.experiments.side_by_side``)."""
    if not tables:
        raise BadInput(f"{where}: no [[variant]]: an experiment needs at least one variant")
    variants: list[VariantSpec] = []
    seen: dict[str, str] = {}
    for number, table in enumerate(tables, start=1):
        if not isinstance(table, dict):
            raise BadInput(f"{where}: variant {number}: expected a [[variant]] table")
        name = _name_check(table.get("name"), where=f"{where}: variant {number}: name")
        here = f"{where}: variant {name!r}"
        if slug(name) in seen:
            other = seen[slug(name)]
            same = "the name" if other == name else f"the run id of {other!r} (both {slug(name)!r})"
            raise BadInput(f"{here}: two variants have {same}; each needs a name of its own")
        seen[slug(name)] = name
        options = {key: value for key, value in table.items() if key != "name"}
        variants.append(variant_check(name, options, where=here, base=base, environ=environ))
    return tuple(variants)


def variant_check(
    name: str, options: Mapping[str, Any], *, where: str, base: Path, environ: Mapping[str, str] | None = None
) -> VariantSpec:
    """One variant's overrides checked (``VARIANT_KEYS``, their types, at
    least one, ``system_prompt_file`` read relative to ``base``,
    ``api_key_env`` looked up in ``environ``): its ``VariantSpec``. Raises
    ``BadInput`` starting with ``where`` — an experiment's ``[[variant]]``
    and ``replay_turns --variant``'s file are checked by this one rule."""
    _keys_check(options, VARIANT_KEYS, where=where, what="variant")
    if not options:
        keys = ", ".join(VARIANT_KEYS)
        raise BadInput(f"{where}: the variant overrides nothing; give it at least one of: {keys}")
    checked = _prompt_read(dict(options), where=where, base=base)
    return VariantSpec(name=name, options=checked, api_key=_key_read(checked, where, environ))


def _prompt_read(options: dict[str, Any], *, where: str, base: Path) -> dict[str, Any]:
    """``system_prompt_file`` (relative to the experiment file) read into
    ``system_prompt``; the file's name is kept beside it."""
    file_name = options.get("system_prompt_file")
    if file_name is None:
        if "system_prompt" in options and not options["system_prompt"].strip():
            raise BadInput(f"{where}: system_prompt is empty")
        return options
    if "system_prompt" in options:
        raise BadInput(f"{where}: give system_prompt or system_prompt_file, not both")
    prompt_path = base / file_name
    try:
        text = prompt_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{where}: system_prompt_file {str(prompt_path)!r} cannot be read: {exc}") from None
    if not text.strip():
        raise BadInput(f"{where}: system_prompt_file {str(prompt_path)!r} is empty")
    return {**options, "system_prompt": text}


def _key_read(options: Mapping[str, Any], where: str, environ: Mapping[str, str] | None) -> str | None:
    """The endpoint key the variant's ``api_key_env`` names, or ``None``."""
    variable = options.get("api_key_env")
    if variable is None:
        return None
    if "base_url" not in options:
        raise BadInput(f"{where}: api_key_env goes with base_url (the key of the variant's own endpoint)")
    value = (os.environ if environ is None else environ).get(variable)
    if not value:
        raise BadInput(f"{where}: api_key_env names {variable!r}, which is not set in the environment")
    return value
