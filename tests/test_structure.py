"""The code stays walkable: modules a reader can hold in their head, functions
that fit on one screen, one name per module inside an app, a shallow import
graph, and production code that never reaches into test code (issues 12 and
24; ``CONTRIBUTING.md#packages-by-concept``). Migrations and tests are exempt.

Complexity and statement counts are ruff's (``C901``, ``PLR0915`` in
``pyproject.toml``, run by ``make lint``); the limits here are the ones ruff
has no rule for.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentlab", "common", "apikeys", "turns", "evaluation", "monitoring")
MAX_LINES = 450
#: A function's body, its docstring not counted: one screen.
MAX_FUNCTION_LINES = 60
#: The longest chain of imports inside one app, in modules. 8 since issue 45:
#: ``evaluation.models`` re-exports the annotation queues' models from
#: ``evaluation.annotation_models`` (split off at the line limit), a leaf of
#: declarations that imports nothing of the app, one link below the models.
MAX_IMPORT_CHAIN = 8
#: Names Django and the layer folders give to many modules of one app.
CONVENTIONAL_NAMES = frozenset(
    {"__init__", "admin", "api", "apps", "models", "tasks", "urls", "views", "selectors", "services", "forms"}
)
#: Folders that hold one module per entity: ``admin/runs.py`` beside ``services/runs.py`` is one entity.
LAYER_FOLDERS = frozenset({"admin", "services", "selectors", "api", "views"})


def _modules(packages: tuple[str, ...]) -> list[Path]:
    return [
        path
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_no_application_module_is_over_the_size_limit():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in _modules(PACKAGES)
    }
    assert len(sizes) > 50  # the walk found the code
    too_big = {name: lines for name, lines in sizes.items() if lines >= MAX_LINES}
    assert too_big == {}, f"split these modules by responsibility (limit {MAX_LINES} lines): {too_big}"


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the last one."""
    body = node.body
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def test_no_function_is_longer_than_one_screen():
    paths = [*_modules((*PACKAGES, "bench")), ROOT / "manage.py"]
    too_long = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and _body_lines(node) > MAX_FUNCTION_LINES
            ):
                too_long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = _body_lines(node)
    assert too_long == {}, f"split into named steps (limit {MAX_FUNCTION_LINES} lines of body): {too_long}"


def _repeated_names(app: str) -> dict[str, list[str]]:
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in _modules((app,)):
        by_name[path.stem].append(path.relative_to(ROOT / app))
    repeated = {}
    for name, paths in by_name.items():
        in_layer_folders = all(len(p.parts) == 2 and p.parts[0] in LAYER_FOLDERS for p in paths)
        if len(paths) > 1 and name not in CONVENTIONAL_NAMES and not in_layer_folders:
            repeated[name] = sorted(str(p) for p in paths)
    return repeated


def test_no_module_name_repeats_inside_an_app():
    """Within ``turns`` and ``evaluation`` a module's name says which module
    it is: only Django's conventional names repeat, and one entity's modules
    in the layer folders (``admin/runs.py`` beside ``services/runs.py``)."""
    assert _repeated_names("evaluation") == {}
    assert _repeated_names("turns") == {}


def test_production_code_never_imports_test_code():
    importers = []
    for path in _modules(("common", "apikeys", "turns", "evaluation", "agentlab")):
        if "testing" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n == "agentlab.testing" or n.startswith("agentlab.testing.") for n in names):
                importers.append(str(path.relative_to(ROOT)))
    assert len(_modules(("agentlab",))) > 20  # the walk found the code
    assert importers == []


def _longest_chain(graph: grimp.ImportGraph, package: str) -> tuple[str, ...]:
    @functools.cache
    def longest(module: str) -> tuple[str, ...]:
        below = [
            longest(m)
            for m in graph.find_modules_directly_imported_by(module)
            if m != module and (m == package or m.startswith(package + "."))
        ]
        return (module, *max(below, key=len, default=()))

    return max((longest(m) for m in graph.modules if m.startswith(package)), key=len)


def test_the_import_chain_inside_evaluation_is_short():
    """No chain of imports inside ``evaluation`` is longer than
    ``MAX_IMPORT_CHAIN`` modules (the import-linter contracts keep the graph
    acyclic, so the longest chain is well defined)."""
    chain = _longest_chain(grimp.build_graph("evaluation"), "evaluation")
    assert len(chain) > 2  # the graph was read
    assert len(chain) <= MAX_IMPORT_CHAIN, " -> ".join(chain)
