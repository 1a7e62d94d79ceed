"""Finding plugins: entry points of the ``agentlab`` group, or dotted paths.

``load_plugin(name)`` finds one plugin: an entry point of the ``agentlab``
group named ``name`` (``[project.entry-points.agentlab] name = "pkg.module"``)
or, when there is none, a dotted path (``pkg.module`` or ``pkg.module:attr``;
a class is instantiated without arguments). It is imported once per process;
a name that is neither is a ``PluginError`` naming the plugins installed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.agent.plugins.hookspecs import ENTRY_POINT_GROUP


class PluginError(Exception):
    """A plugin could not be found, imported or registered (a configuration
    error: reported before any turn runs)."""


@dataclass(frozen=True)
class LoadedPlugin:
    """One imported plugin. ``name``: as configured (an entry-point name or a
    dotted path). ``target``: what was imported (``pkg.module[:attr]``).
    ``distribution`` / ``version``: the installed distribution it comes
    from, when known (``None`` otherwise)."""

    name: str
    target: str
    obj: Any
    distribution: str | None
    version: str | None

    def describe(self) -> dict[str, Any]:
        """``{"name", "target", "distribution", "version"}`` — what a run's
        config snapshot records."""
        return {
            "name": self.name,
            "target": self.target,
            "distribution": self.distribution,
            "version": self.version,
        }


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of the ``agentlab`` group, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _import_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # "pkg.module.attr" written without the colon
        head, _, tail = module_name.rpartition(".")
        if attr or not head or exc.name != module_name:
            raise
        obj, attr = importlib.import_module(head), tail
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj() if inspect.isclass(obj) else obj


def _distribution_of(module_name: str) -> tuple[str | None, str | None]:
    """``(distribution, version)`` of the installed distribution that holds
    the imported module ``module_name``, or ``(None, None)``.

    A top-level name may be claimed by a distribution that does not hold this
    module (ppi-python, for one, ships a top-level ``tests`` package), so a
    candidate of ``packages_distributions()`` counts only when the module's
    file is one of its files, or lies under the folder of its editable
    install (PEP 610's ``direct_url.json``)."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    path = Path(file).resolve() if file else None
    top = module_name.split(".", 1)[0]
    for name in importlib.metadata.packages_distributions().get(top, []):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if path is None or _holds(dist, path):
            return dist.metadata["Name"] or name, dist.version
    return None, None


def _holds(dist: importlib.metadata.Distribution, path: Path) -> bool:
    """Whether ``path`` (a module's resolved file) belongs to ``dist``."""
    for entry in dist.files or ():
        if entry.suffix == ".py" and Path(str(dist.locate_file(entry))).resolve() == path:
            return True
    from urllib.parse import urlparse
    from urllib.request import url2pathname  # deferred: it brings http.client and email

    direct = dist.read_text("direct_url.json")
    if not direct:
        return False
    try:
        info = json.loads(direct)
    except ValueError:
        return False
    if not (isinstance(info, dict) and (info.get("dir_info") or {}).get("editable")):
        return False
    root = Path(url2pathname(urlparse(str(info.get("url", ""))).path)).resolve()
    return path.is_relative_to(root)


@functools.cache
def load_plugin(name: str) -> LoadedPlugin:
    """Import the plugin ``name`` (see the module docstring), once per process.

    Raises ``PluginError`` when no entry point has that name and it is not an
    importable dotted path, or when importing it fails.
    """
    if not isinstance(name, str) or not name.strip():
        raise PluginError(f"a plugin name must be non-empty text, got {name!r}")
    name = name.strip()
    entry = installed_plugins().get(name)
    try:
        if entry is not None:
            obj = entry.load()
            obj = obj() if inspect.isclass(obj) else obj
            dist = entry.dist
            version = dist.version if dist is not None else None
            return LoadedPlugin(name, entry.value, obj, dist.name if dist is not None else None, version)
        if not all(part.isidentifier() for part in name.replace(":", ".").split(".")):
            raise PluginError(_unknown(name))
        obj = _import_target(name)
    except PluginError:
        raise
    except ModuleNotFoundError as exc:
        if entry is None and exc.name and name.startswith(exc.name):
            raise PluginError(_unknown(name)) from None
        raise PluginError(f"plugin {name!r} could not be imported: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise PluginError(f"plugin {name!r} could not be imported: {type(exc).__name__}: {exc}") from exc
    module_name = getattr(obj, "__name__", None) if inspect.ismodule(obj) else type(obj).__module__
    dist_name, version = _distribution_of(module_name or name)
    if version is None:
        version = getattr(obj, "__version__", None)
    return LoadedPlugin(name, name, obj, dist_name, version)


def _unknown(name: str) -> str:
    names = ", ".join(sorted(installed_plugins())) or "none"
    return (
        f"no plugin {name!r}: not an entry point of the {ENTRY_POINT_GROUP!r} group "
        f"(installed: {names}) and not an importable dotted path"
    )
