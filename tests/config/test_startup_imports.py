"""A command imports what it uses (issue 32): settings and app loading import no
provider, MCP, tool or server module, so ``manage.py help`` starts at once.

Each command runs in a subprocess under ``python -X importtime``; the tree it
prints says which module was imported first by which. A failure names the
heavy module and the chain of imports that brought it in, outermost first. A
chain's first module is one Django imported by name (``importlib``, which
importtime does not log): the settings, an app, an ``admin`` module found by
autodiscovery or the command itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The agent stack's heavy imports: the OpenAI SDK's types, the MCP SDK, aiohttp,
#: daphne's server (Twisted), scipy, the local model's bindings, the telemetry SDKs;
#: numpy (through rank_bm25), jsonschema and rich, which only some tools and the
#: printed tables use.
HEAVY = (
    "openai",
    "mcp",
    "aiohttp",
    "daphne.server",
    "scipy",
    "llama_cpp",
    "opentelemetry",
    "prometheus_client",
    "numpy",
    "rank_bm25",
    "jsonschema",
    "rich",
)

COMMANDS = (["help"], ["compare_runs", "--help"], ["leaderboard", "--help"])


@dataclass(frozen=True)
class Imported:
    """One line of ``-X importtime``: a module and its depth in the import tree."""

    depth: int
    name: str


def import_tree(stderr: str) -> list[Imported]:
    """The modules of an ``-X importtime`` log in its order: a module's
    children come before it, each one level deeper (two spaces a level)."""
    tree = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        raw = line.rsplit("|", 1)[1][1:]
        stripped = raw.lstrip(" ")
        tree.append(Imported(depth=(len(raw) - len(stripped)) // 2, name=stripped))
    return tree


def chain_to(tree: list[Imported], index: int) -> list[str]:
    """The chain of imports that led to ``tree[index]``, outermost first: each
    parent is the next line of the log one level up."""
    chain = [tree[index].name]
    depth = tree[index].depth
    for entry in tree[index + 1 :]:
        if entry.depth < depth:
            chain.append(entry.name)
            depth = entry.depth
            if depth == 0:
                break
    return chain[::-1]


def _is_in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def heavy_imports(tree: list[Imported]) -> dict[str, list[str]]:
    """Each heavy module (``HEAVY``) the log shows, with the chain of its first
    import up to the heavy package itself."""
    found: dict[str, list[str]] = {}
    for index, entry in enumerate(tree):
        for heavy in HEAVY:
            if heavy not in found and _is_in(entry.name, heavy):
                chain = chain_to(tree, index)
                found[heavy] = chain[: next(i for i, name in enumerate(chain) if _is_in(name, heavy)) + 1]
    return found


def run_with_importtime(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` under ``-X importtime`` in the project root."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-X", "importtime", "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_parser_finds_a_chain():
    log = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:        10 |         10 |       openai._types",
            "import time:        10 |         20 |     openai",
            "import time:        10 |         30 |   agentlab.agent.providers",
            "import time:        10 |         10 |   agentlab.agent.types",
            "import time:        10 |         50 | agentlab.agent",
            "import time:        10 |         10 | json",
        ]
    )
    assert heavy_imports(import_tree(log)) == {
        "openai": ["agentlab.agent", "agentlab.agent.providers", "openai"]
    }


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_command_imports_no_provider_mcp_tool_or_server_module(args):
    result = run_with_importtime(args)
    assert result.returncode == 0, result.stderr[-2000:]
    tree = import_tree(result.stderr)
    assert any(entry.name == "django.core.management" for entry in tree)  # the log was read
    found = heavy_imports(tree)
    report = "\n".join(f"  {heavy}: {' -> '.join(chain)}" for heavy, chain in found.items())
    assert found == {}, (
        f"manage.py {' '.join(args)} imports the agent stack at start-up; import it where it is "
        f"used (docs/architecture.md#the-package-map). Each chain starts at a module imported by a "
        f"module Django imported by name (the settings, an app, an admin module, the command):\n{report}"
    )


def test_runserver_is_daphne_s_and_its_app_must_come_before_staticfiles(settings):
    from django.core.management import get_commands

    from config.apps import daphne_check

    assert get_commands()["runserver"] == "daphne"
    assert daphne_check() == []
    apps = [app for app in settings.INSTALLED_APPS if app != "config.apps.DaphneConfig"]
    settings.INSTALLED_APPS = [*apps, "config.apps.DaphneConfig"]
    assert get_commands()["runserver"] == "django.contrib.staticfiles"
    assert [error.id for error in daphne_check()] == ["daphne.E001"]
