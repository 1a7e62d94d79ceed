"""Scorers a plugin provides (the ``agentlab_scorers`` hook, docs/extending.md).

A plugin's ``agentlab_scorers()`` returns ``{name: scorer}``; each scorer is
called as ``scorer(example, prediction)`` (the hook's docstring,
``agentlab.agent.plugins.hookspecs``) and returns a verdict. Finding the
scorers is checked at once — a plugin that does not load, whose hook raises,
returns no mapping or a name that is a built-in scorer's, is a
``PluginError`` (a configuration error: exit 2 before anything is written).
Scoring is never an error: a scorer that raises or returns something
unreadable gives :meth:`Score.unscored` with the reason, so the prediction is
"could not score", never a failed run and never "wrong".
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.agent.plugins import LoadedPlugin, PluginError, load_plugin
from evaluation.scoring.base import Score

logger = logging.getLogger(__name__)

HOOK = "agentlab_scorers"


@dataclass(frozen=True)
class PluginScorer:
    """One scorer of one plugin: ``name`` (as runs store it), ``plugin`` (the
    loaded plugin, whose ``describe()`` a run's config records) and ``fn``."""

    name: str
    plugin: LoadedPlugin
    fn: Callable[..., Any]

    def describe(self) -> dict[str, Any]:
        """``{"scorer", "plugin", "target", "distribution", "version"}``."""
        info = self.plugin.describe()
        return {"scorer": self.name, "plugin": info.pop("name"), **info}

    def score(self, example: Mapping[str, Any], prediction: Mapping[str, Any]) -> Score:
        """The verdict on ``prediction`` (``{"answer", "steps", "usage"}``)
        for ``example``; never raises (see the module docstring)."""
        try:
            value = self.fn(example, prediction)
        except Exception as exc:
            logger.warning("plugin scorer %s raised", self.name, exc_info=True)
            return Score.unscored(self.name, f"scorer {self.name!r} raised {type(exc).__name__}: {exc}")
        return read_verdict(self.name, value)


def read_verdict(name: str, value: Any) -> Score:
    """A plugin scorer's return value as a ``Score``: a ``Score`` as it is
    (its ``scorer`` set to ``name``), or a mapping ``{"score", "explanation",
    "correct"?}`` with ``score`` a number in [0, 1] or ``None``. Anything else
    is unscored, saying what came back."""
    if isinstance(value, Score):
        return Score(value.value, value.correct, name, value.explanation)
    if not isinstance(value, Mapping) or "score" not in value:
        return Score.unscored(name, f"scorer {name!r} returned {_short(value)}, not a verdict with a score")
    raw, explanation = value["score"], str(value.get("explanation") or "")
    if raw is None:
        return Score.unscored(name, explanation or f"scorer {name!r} could not score")
    number = isinstance(raw, int | float) and not isinstance(raw, bool)
    if not number or not math.isfinite(raw) or not 0 <= raw <= 1:
        return Score.unscored(name, f"scorer {name!r} returned score {_short(raw)}, not a number in [0, 1]")
    correct = value.get("correct", raw == 1)
    if not isinstance(correct, bool):
        return Score.unscored(name, f"scorer {name!r} returned correct {_short(correct)}, not true or false")
    return Score(float(raw), correct, name, explanation)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@functools.cache
def _scorers_of(plugin_name: str) -> dict[str, PluginScorer]:
    plugin = load_plugin(plugin_name)
    impl = getattr(plugin.obj, HOOK, None)
    if impl is None or not callable(impl):
        return {}
    try:
        value = impl()
    except Exception as exc:
        raise PluginError(f"plugin {plugin_name!r}: {HOOK} raised {type(exc).__name__}: {exc}") from exc
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PluginError(f"plugin {plugin_name!r}: {HOOK} returned {_short(value)}, not {{name: scorer}}")
    out: dict[str, PluginScorer] = {}
    for name, fn in value.items():
        if not isinstance(name, str) or not name.strip() or not callable(fn):
            raise PluginError(
                f"plugin {plugin_name!r}: {HOOK} entry {_short(name)} is not a name with a callable scorer"
            )
        out[name] = PluginScorer(name, plugin, fn)
    return out


def plugin_scorers(
    plugin_names: Sequence[str], *, reserved: frozenset[str] = frozenset()
) -> dict[str, PluginScorer]:
    """The scorers of the plugins ``plugin_names`` (in order), by name.

    Raises ``PluginError`` when a plugin does not load, its hook raises or
    returns something unreadable, a name is in ``reserved`` (the built-in
    scorers) or two plugins give the same name."""
    found: dict[str, PluginScorer] = {}
    for plugin_name in dict.fromkeys(n.strip() for n in plugin_names if n and n.strip()):
        for name, scorer in _scorers_of(plugin_name).items():
            if name in reserved:
                raise PluginError(f"plugin {plugin_name!r}: scorer name {name!r} is a built-in scorer's")
            if name in found and found[name].plugin.name != plugin_name:
                raise PluginError(
                    f"scorer {name!r} is given by plugins {found[name].plugin.name!r} and {plugin_name!r}"
                )
            found[name] = scorer
    return found
