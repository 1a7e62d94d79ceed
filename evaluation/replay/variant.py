"""The variant a replay drives the recorded turns under: a ``run_experiment``
``[[variant]]``'s keys in a TOML file of their own, or ``run_eval``'s options
(docs/evaluating.md#replaying-recorded-turns).

The file is one variant table at its top level — ``name`` (optional) and the
experiment variant's keys (``VARIANT_KEYS``: ``model``, ``base_url``,
``api_key_env``, ``system_prompt`` or ``system_prompt_file``, ``plugins``,
``max_steps``, ``max_output_tokens``, ``temperature`` …), checked by the very
rule an experiment file's variants are (``experiment_file.variant_check``):
an unknown key names the closest known one. The command's own flags
(``--model``, ``--base-url``, ``--system-prompt``, ``--plugin``,
``--max-steps``) override the file's keys.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.agent.extensions import Extensions
from common.errors import BadInput
from evaluation.experiments.experiment_file import variant_check

#: the variant keys a replay does not use (an experiment's run-level ones)
_UNUSED = frozenset({"mcp", "review", "price_in", "price_out"})


@dataclass(frozen=True)
class ReplayVariant:
    """What the recorded turns are driven under: the ``options`` stored with
    the replay (``Replay.variant``; a prompt file read into
    ``system_prompt``) and the endpoint's key (``api_key``, from
    ``api_key_env``; never stored)."""

    options: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)

    @property
    def max_steps(self) -> int | None:
        """The step limit of every replayed turn (``None``: its original's)."""
        value = self.options.get("max_steps")
        return int(value) if value is not None else None

    def agent_options(self, original: Mapping[str, Any]) -> dict[str, Any]:
        """A replayed turn's ``Turn.agent_options``: its original's
        ``system_prompt`` and ``temperature`` (nothing else: a side-by-side
        turn's endpoint is not the replay's), with the variant's over them."""
        keys = ("system_prompt", "temperature")
        options = {key: original[key] for key in keys if key in (original or {})}
        options.update({key: self.options[key] for key in keys if key in self.options})
        return options

    def extensions(self, settings_plugins: tuple[str, ...]) -> Extensions:
        """The plugins the replayed turns run with: the settings', then the variant's."""
        return Extensions(plugins=tuple(dict.fromkeys([*settings_plugins, *self.options.get("plugins", [])])))


def replay_variant(
    *,
    path: str | None,
    overrides: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> ReplayVariant:
    """The variant of ``path`` (a TOML file; ``None``: none) with ``overrides``
    (the flags given, ``None`` values left out) over it. Raises ``BadInput``
    naming the file and the key: a file that cannot be read or is not TOML,
    an unknown key or one of the wrong type, a key a replay does not use
    (``mcp``, ``review``, prices), an empty prompt; a ``max_steps`` below 1,
    a ``temperature`` outside [0, 2]; neither a file nor a flag."""
    given = {key: value for key, value in overrides.items() if value is not None and value != []}
    table: dict[str, Any] = {}
    where, base = "replay_turns", Path.cwd()
    if path is not None:
        where, base = path, Path(path).parent
        try:
            table = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise BadInput(f"{path}: cannot read the variant file: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BadInput(f"{path}: not a TOML file: {exc}") from None
    name = table.pop("name", "variant")
    if not isinstance(name, str):
        raise BadInput(f"{where}: variant: name: expected a string, got {name!r}")
    if "system_prompt" in given:
        table.pop("system_prompt_file", None)
    unused = sorted(_UNUSED.intersection(table))
    if unused:
        raise BadInput(f"{where}: variant: {unused[0]!r} is an experiment's key a replay does not use")
    if not table and not given:
        raise BadInput(
            "replay_turns: no variant: give --variant FILE.toml or at least one of --model, --base-url, "
            "--system-prompt, --system-prompt-file, --plugin, --max-steps"
        )
    spec = variant_check(name, {**table, **given}, where=where, base=base, environ=environ)
    options = spec.options
    if options.get("max_steps") is not None and options["max_steps"] < 1:
        raise BadInput(f"{where}: variant: max_steps must be at least 1, got {options['max_steps']}")
    temperature = options.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise BadInput(f"{where}: variant: temperature must be within [0, 2], got {temperature}")
    return ReplayVariant(options=options, api_key=spec.api_key)
