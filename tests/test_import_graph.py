"""flashpoint's import graph: no cycle, and the core never imports the edge (docs/architecture.md, "Layers").

Every module under ``src/flashpoint`` is parsed with ``ast`` (nothing is imported), so modules added later are checked
without a list to keep. What counts as an edge:

- every import that can run: at module level and inside functions. A lazy import is a dependency all the same, only
  a later one, so it may close a cycle as surely as a module-level one.
- not the imports under ``if TYPE_CHECKING:``: they never run. They are collected apart, and a cycle they would
  close is printed (``pytest -s``) but does not fail.
- ``from flashpoint.pkg import name`` is an edge to ``flashpoint.pkg.name`` when that is a module, else to
  ``flashpoint.pkg`` (a package is its ``__init__``; ``flashpoint`` itself is the SDK surface). Relative imports
  are resolved against the importing module's package.
- importing ``flashpoint.a.b`` runs the ``__init__`` of ``flashpoint`` and ``flashpoint.a`` first; that is Python's
  doing, not an edge of the importer (counted, it would put every module in a cycle with the SDK surface).

The static half of the boundary; ``tests/test_imports.py`` is the dynamic half (what ``import flashpoint`` loads), and
ruff's TID251 bans (pyproject.toml) flag the same mistakes in the editor.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: the core: never imports the edge (modules, and packages with everything under them)
CORE = (
    "flashpoint._version",
    "flashpoint.errors",
    "flashpoint.config",
    "flashpoint.gpus",
    "flashpoint.jobs",
    "flashpoint.wire.codec",
    "flashpoint.spec",
    "flashpoint.explain",
    "flashpoint.sdk.context",
    "flashpoint.fleet.discovery",
    "flashpoint.store",
    "flashpoint.scheduler",
    "flashpoint.worker",
    "flashpoint.backends",
)
#: the edge: the HTTP layer, the CLI, the client, the server and the embedded server (and what only they share)
EDGE = (
    "flashpoint.api",
    "flashpoint.cli",
    "flashpoint.__main__",
    "flashpoint.sdk.client",
    "flashpoint.hosting.server",
    "flashpoint.hosting.embedded",
    "flashpoint.hosting.plane",
    "flashpoint.dev.server",
)
#: the only edges from outside the edge into it: the SDK's default connection, importing lazily what it starts
SEAMS = {
    ("flashpoint.sdk.default_connection", "flashpoint.sdk.client"),
    ("flashpoint.sdk.default_connection", "flashpoint.hosting.embedded"),
}


@dataclass
class Graph:
    """Module -> the flashpoint modules it imports, split by whether the import can run."""

    modules: set[str]
    runtime: dict[str, set[str]] = field(default_factory=dict)
    type_only: dict[str, set[str]] = field(default_factory=dict)

    def edges(self, *, with_type_only: bool = False) -> dict[str, set[str]]:
        if not with_type_only:
            return self.runtime
        return {m: self.runtime.get(m, set()) | self.type_only.get(m, set()) for m in self.modules}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement anywhere in ``tree``, with whether it sits under ``if TYPE_CHECKING:``."""

    def walk(node: ast.AST, type_only: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, type_only
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                yield from walk(statement, True)
            for statement in node.orelse:
                yield from walk(statement, type_only)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, type_only)

    yield from walk(tree, False)


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]) -> Iterable[str]:
    """The flashpoint modules one import statement depends on."""

    def nearest(name: str) -> str | None:
        # `import flashpoint.a.b` where b is a function would fail, but be generous: the deepest module named
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        for alias in node.names:
            found = nearest(alias.name)
            if found is not None:
                yield found
        return
    base = node.module or ""
    if node.level:
        package = importer if is_package else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            yield f"{base}.{alias.name}"
        else:
            found = nearest(base)
            if found is not None:
                yield found


def build_graph(src: Path, package: str = "flashpoint") -> Graph:
    files = {module_name(path, src): path for path in sorted((src / package).rglob("*.py"))}
    graph = Graph(set(files))
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, type_only in _imports(tree):
            for target in _targets(node, name, path.name == "__init__.py", graph.modules):
                if target != name:
                    (graph.type_only if type_only else graph.runtime).setdefault(name, set()).add(target)
    return graph


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component that has one; Tarjan, then a BFS inside."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # recursion depth is bounded by the module count (about 100)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)

    cycles = []
    for component in components:
        members, start = set(component), component[0]
        came_from: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came_from:
            following = []
            for node in frontier:
                for nxt in sorted(edges.get(node, ())):
                    if nxt in members and nxt not in came_from:
                        came_from[nxt] = node
                        following.append(nxt)
            frontier = following
        path = [start]
        while (previous := came_from[path[-1]]) != start:
            path.append(previous)
        cycles.append([start, *reversed(path)])
    return sorted(cycles)


def _under(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def _show(cycle: list[str]) -> str:
    return " -> ".join(cycle)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(SRC)


def test_the_graph_sees_every_module_and_the_sdk_seam(graph: Graph) -> None:
    # Guard against a check that can never fail: the known lazy seam, inside a function, is an edge.
    assert {"flashpoint", "flashpoint.sdk.endpoint", "flashpoint.scheduler.loop", "flashpoint.api.app"} <= graph.modules
    assert "flashpoint.hosting.embedded" in graph.runtime["flashpoint.sdk.default_connection"]
    assert "flashpoint.sdk.endpoint" in graph.runtime["flashpoint"]


def test_no_import_cycle(graph: Graph) -> None:
    cycles = find_cycles(graph.edges())
    # Not a failure: a cycle closed only by imports under `if TYPE_CHECKING:` never runs. Listed for `pytest -s`.
    for cycle in find_cycles(graph.edges(with_type_only=True)):
        if cycle not in cycles:
            print(f"closed only by a TYPE_CHECKING import: {_show(cycle)}")
    assert not cycles, "import cycles (lazy imports inside functions count):\n" + "\n".join(map(_show, cycles))


def test_the_core_never_imports_the_edge(graph: Graph) -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.runtime.items()
        if _under(module, CORE)
        for target in targets
        if _under(target, EDGE)
    )
    assert not wrong, "the core imports the edge (docs/architecture.md, Layers):\n" + "\n".join(wrong)


def test_the_sdk_reaches_the_edge_only_through_the_default_connection(graph: Graph) -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.runtime.items()
        if not _under(module, EDGE)
        for target in targets
        if _under(target, EDGE) and (module, target) not in SEAMS
    )
    assert not wrong, "outside the edge, only default_connection may import the edge:\n" + "\n".join(wrong)


# --------------------------------------------------------------------------------------------------------------------
# The checker itself, on a package made for it


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_lazy_import_closes_a_cycle_and_a_type_checking_one_does_not(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "from pkg.a import A\n",
            "a.py": "from pkg import b\nA = 1\n",
            "b.py": "def later():\n    from .c import C\n",
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nC = 1\n",
            "sub/__init__.py": "",
            "sub/d.py": "from .. import c\nfrom . import e\nimport pkg.sub.e\n",
            "sub/e.py": "def f():\n    from pkg.sub.d import f\n",
        },
    )
    graph = build_graph(src, "pkg")

    assert graph.runtime == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.sub.d": {"pkg.c", "pkg.sub.e"},
        "pkg.sub.e": {"pkg.sub.d"},
    }
    assert graph.type_only == {"pkg.c": {"pkg.a"}}
    assert find_cycles(graph.edges()) == [["pkg.sub.d", "pkg.sub.e", "pkg.sub.d"]]
    assert find_cycles(graph.edges(with_type_only=True)) == [
        ["pkg.a", "pkg.b", "pkg.c", "pkg.a"],
        ["pkg.sub.d", "pkg.sub.e", "pkg.sub.d"],
    ]
