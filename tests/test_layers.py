"""The package's layers: no import cycle, and dependencies point down only.

Every module of ``ledgermem`` is parsed (``ast``, nothing is imported), with the imports
under ``if TYPE_CHECKING:`` and inside functions: an import that only feeds an
annotation still ties two modules together. Importing ``a.b.c`` also runs the packages
``a`` and ``a.b``; those implicit edges are left out, or ``ledgermem/__init__.py``
(which imports the whole public API) would be in a cycle with every module.

The order is STYLE.md's: interfaces → agent (and the facade beside it) → pipeline →
domain → retrieval → store and providers → types and errors.
"""

from __future__ import annotations

import ast
from collections import deque
from functools import cache
from pathlib import Path

import pytest

import ledgermem

ROOT = "ledgermem"
PACKAGE = Path(ledgermem.__file__).parent

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("interfaces", ("ledgermem", "ledgermem.__main__", "ledgermem.cli", "ledgermem.demo",
                    "ledgermem.mcp", "ledgermem.server", "ledgermem.adapters",
                    "ledgermem.benchmarks", "ledgermem.testing", "ledgermem.config",
                    "ledgermem.bootstrap", "ledgermem.doctor")),
    ("agent and facade", ("ledgermem.agent", "ledgermem.aio", "ledgermem.memory",
                          "ledgermem.user_memory", "ledgermem.knowledge",
                          "ledgermem.handle", "ledgermem.ledger_views",
                          "ledgermem.review")),
    ("pipeline and views", ("ledgermem.pipeline", "ledgermem.views",
                            "ledgermem.ledger_index")),
    ("domain", ("ledgermem.domain",)),
    ("retrieval", ("ledgermem.retrieval",)),
    ("store and providers", ("ledgermem.store", "ledgermem.providers", "ledgermem.transfer",
                             "ledgermem.backup")),
    ("types and errors", ("ledgermem.types", "ledgermem.errors", "ledgermem.clock",
                          "ledgermem.validation", "ledgermem.background")),
)
"""Top to bottom; a module belongs to the layer of its longest matching prefix."""

ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("ledgermem.store", "ledgermem.domain.events"):
        "the ledger's vocabulary: pure, imports nothing above types; the stores read "
        "events through it as they read types",
    ("ledgermem.transfer", "ledgermem.domain.events"):
        "the ledger's vocabulary, as for the stores: an import checks each event's "
        "payload against its kind (``check_payload``) before replaying it",
    ("ledgermem.store", "ledgermem.domain.projection"):
        "the one projection (event → row changes): pure, so the stores' views, rebuild "
        "and verify apply events through it instead of keeping their own copy",
}
"""Imports against the order that are deliberate: (importer's prefix, module) → why."""

KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {
    ("ledgermem.handle", "ledgermem.memory"):
        "UserHandle is given the Memory it belongs to (an annotation, under "
        "TYPE_CHECKING), so memory → user_memory → knowledge → handle → memory; the "
        "facade's own loop, not a layer's. Remove this entry once the handle is given "
        "its parts instead.",
}
"""Edges left out of the cycle search, each with why; a test fails once one is gone."""

FACADE = ("ledgermem.memory", "ledgermem.knowledge", "ledgermem.handle",
          "ledgermem.user_memory", "ledgermem.cli", "ledgermem.aio", "ledgermem.review")
BELOW_FACADE = ("ledgermem.pipeline", "ledgermem.domain", "ledgermem.retrieval",
                "ledgermem.store", "ledgermem.providers")


def _within(module: str, prefix: str) -> bool:
    """Whether ``module`` is ``prefix`` or under it (the root package only itself)."""
    return module == prefix or (prefix != ROOT and module.startswith(prefix + "."))


@cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = (ROOT, *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, source: str, *, package: bool = False) -> set[str]:
    """The dotted names module ``name`` imports (``package``: its ``__init__``), wherever
    the import statement is: top level, ``if TYPE_CHECKING:``, inside a function."""
    here = name if package else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level \
                else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:  # ``from . import x``: the module ``x``, if it is one
                inner = f"{module}.{alias.name}"
                names.add(inner if inner in modules() else module)
    return names


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module → the package's modules it imports (itself left out)."""
    known = modules()
    return {name: frozenset(m for m in imported(name, path.read_text(encoding="utf-8"),
                                                package=path.name == "__init__.py")
                            if m in known and m != name)
            for name, path in known.items()}


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` (0 is the top) of ``module``'s layer."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    assert best is not None, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return best[1]


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative),
    each as a closed path through it, e.g. ``[a, b, c, a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(_path(set(component), edges))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _path(component: set[str], edges: dict[str, frozenset[str]]) -> list[str]:
    """A shortest closed path through the component from its first module (breadth
    first), e.g. ``[a, b, c, a]``."""
    start = min(component)
    parent: dict[str, str] = {}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        for child in sorted(edges[node] & component):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child not in parent:
                parent[child] = node
                todo.append(child)
    return sorted(component)  # not reached: every module of a component reaches start


def test_the_package_has_no_import_cycle() -> None:
    edges = {name: frozenset(m for m in deps if (name, m) not in KNOWN_CYCLE_EDGES)
             for name, deps in graph().items()}
    found = [" → ".join(cycle) for cycle in cycles(edges)]
    assert found == [], "import cycles:\n" + "\n".join(found)


def test_each_known_cycle_edge_still_exists() -> None:
    gone = [f"{a} → {b}" for a, b in KNOWN_CYCLE_EDGES if b not in graph().get(a, ())]
    assert gone == [], f"no longer imported, drop from KNOWN_CYCLE_EDGES: {gone}"


def test_nothing_below_the_facade_imports_it() -> None:
    wrong = sorted(f"{name} imports {module}" for name, deps in graph().items()
                   for module in deps
                   if any(_within(name, p) for p in BELOW_FACADE)
                   and any(_within(module, p) for p in FACADE))
    assert wrong == []


def test_dependencies_point_down() -> None:
    wrong = []
    for name, deps in sorted(graph().items()):
        for module in sorted(deps):
            if layer_of(module) >= layer_of(name):
                continue
            if any(_within(name, importer) and module == target
                   for importer, target in ALLOWED_UPWARD):
                continue
            wrong.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {module} "
                         f"({LAYERS[layer_of(module)][0]})")
    assert wrong == [], "imports against the layer order:\n" + "\n".join(wrong)


def test_every_module_has_a_layer() -> None:
    assert [layer_of(name) for name in modules()]
    assert layer_of("ledgermem") == 0
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("ledgermem.grab_bag")


def test_the_checks_see_every_import_and_every_cycle() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "from ..store.base import Store\n"
              "from . import prompts\n"
              "if TYPE_CHECKING:\n"
              "    from ..memory import Memory\n"
              "def later() -> None:\n"
              "    import ledgermem.cli\n")
    found = imported("ledgermem.pipeline.extraction", source) & set(modules())
    assert found == {"ledgermem.store.base", "ledgermem.pipeline.prompts", "ledgermem.memory",
                     "ledgermem.cli"}
    edges = {"a": frozenset({"b"}), "b": frozenset({"c", "d"}), "c": frozenset({"a"}),
             "d": frozenset(), "e": frozenset({"a"})}
    assert cycles(edges) == [["a", "b", "c", "a"]]
    assert cycles({**edges, "c": frozenset()}) == []
