"""flashpoint's import graph: imports run one way, down the layers, by unit (docs/architecture.md, "Layers").

A unit is a flat module of the vocabulary or a top-level package with everything under it; ``ORDER`` lists them bottom
to top. Every import between two units goes down that list, except the designed lazy seams (``SEAMS``, by module,
each inside a function), and no cycle closes between modules, whether through module-level imports, imports inside
functions or imports for types only. The map's layer table must show the same order and seams.

Every module under ``src/flashpoint`` is parsed with ``ast`` (nothing is imported), so modules added later are checked
without a list to keep. What counts as an edge:

- every import that can run: at module level and inside functions. A lazy import is a dependency all the same, only
  a later one, so it may close a cycle as surely as a module-level one.
- the imports under ``if TYPE_CHECKING:`` too: they never run, but a type-only cycle still ties two modules into one
  concept, and a type-only import up the layers is still a dependency up.
- ``from flashpoint.pkg import name`` is an edge to ``flashpoint.pkg.name`` when that is a module, else to
  ``flashpoint.pkg`` (a package is its ``__init__``; ``flashpoint`` itself is the SDK surface). Relative imports
  are resolved against the importing module's package.
- importing ``flashpoint.a.b`` runs the ``__init__`` of ``flashpoint`` and ``flashpoint.a`` first; that is Python's
  doing, not an edge of the importer (counted, it would put every module in a cycle with the SDK surface).

The static half of the boundary; ``tests/test_imports.py`` is the dynamic half (what ``import flashpoint`` loads), and
ruff's TID251 bans (pyproject.toml) flag imports of the edge packages in the editor.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: every unit (a flat module or a top-level package, with everything under it), bottom to top: an import may only go
#: down this list (docs/architecture.md, "Layers", shows the same list and is checked against it below)
ORDER = (
    # vocabulary: leaves first
    "errors",
    "clock",
    "_version",
    "private",
    "terminal",
    "explain",
    "flashtypes",
    "config",
    "gpus",
    "access",
    "scaling",
    # the core, with the vocabulary that stands on its lower packages
    "environments",
    "jobs",
    "wire",
    "spec",
    "fleet",
    "store",
    "backends",
    "scheduler",
    # what user code calls, and what stands on it
    "sdk",
    "flash",
    "runpodapps",
    "worker",
    "flashpoint",
    # the edge
    "api",
    "hosting",
    "simulation",
    "dev",
    "cli",
    "__main__",
)
#: each unit's tier, as the map's layer table names it
TIERS = {
    **dict.fromkeys(("errors", "clock", "_version", "private", "terminal", "explain", "flashtypes"), "vocabulary"),
    **dict.fromkeys(("config", "gpus", "access", "scaling", "jobs", "spec"), "vocabulary"),
    **dict.fromkeys(("environments", "wire", "fleet", "store", "backends", "scheduler", "flash", "worker"), "core"),
    **dict.fromkeys(("sdk", "runpodapps", "flashpoint"), "sdk"),
    **dict.fromkeys(("api", "hosting", "simulation", "dev", "cli", "__main__"), "edge"),
}
#: the designed lazy seams: the only imports that go up the list, each inside a function, by module
SEAMS = {
    # the SDK starts the embedded plane on a decorated function's first call
    ("flashpoint.sdk.default_connection", "flashpoint.hosting.embedded"),
    # flashpoint.deploy packs the project folder as the hosts unpack it, loaded only to deploy
    ("flashpoint.sdk.deploy", "flashpoint.hosting.artifacts"),
    # runpod_flash resolves to the flashpoint surface while an app loads
    ("flashpoint.flash.alias", "flashpoint"),
    # runpod resolves to Runpod SDK 2.x's App surface, flashpoint's, in the same places
    ("flashpoint.flash.runpodalias", "flashpoint.runpodapps"),
    # flashpoint.deploy reads which runpod.Apps a project declares, without importing it
    ("flashpoint.sdk.deploy", "flashpoint.hosting.appscan"),
}


@dataclass
class Graph:
    """Module -> the flashpoint modules it imports, split by whether the import can run, and of those that can, the
    ones made when the module loads (``eager``: not inside a function)."""

    modules: set[str]
    runtime: dict[str, set[str]] = field(default_factory=dict)
    type_only: dict[str, set[str]] = field(default_factory=dict)
    eager: dict[str, set[str]] = field(default_factory=dict)

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


Found = tuple[ast.Import | ast.ImportFrom, bool, bool]


def _imports(tree: ast.AST) -> Iterator[Found]:
    """Every import statement anywhere in ``tree``, with whether it sits under ``if TYPE_CHECKING:`` and whether it
    sits inside a function (runs when called, not when the module loads)."""

    def walk(node: ast.AST, type_only: bool, lazy: bool) -> Iterator[Found]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, type_only, lazy
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                yield from walk(statement, True, lazy)
            for statement in node.orelse:
                yield from walk(statement, type_only, lazy)
            return
        inside = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            yield from walk(child, type_only, inside)

    yield from walk(tree, False, False)


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
        for node, type_only, lazy in _imports(tree):
            for target in _targets(node, name, path.name == "__init__.py", graph.modules):
                if target != name:
                    (graph.type_only if type_only else graph.runtime).setdefault(name, set()).add(target)
                    if not type_only and not lazy:
                        graph.eager.setdefault(name, set()).add(target)
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


def unit(module: str) -> str:
    """The unit a module belongs to: its top-level package or flat module (``flashpoint`` for the package's
    ``__init__``, the public surface)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _show(cycle: list[str]) -> str:
    return " -> ".join(cycle)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(SRC)


def test_the_graph_sees_every_module_and_the_seams(graph: Graph) -> None:
    # Guard against a check that can never fail: the known lazy seams, inside functions, are edges, and not eager ones.
    assert {"flashpoint", "flashpoint.sdk.endpoint", "flashpoint.scheduler.loop", "flashpoint.api.app"} <= graph.modules
    for module, target in SEAMS:
        assert target in graph.runtime[module]
        assert target not in graph.eager.get(module, set())
    assert "flashpoint.sdk.endpoint" in graph.eager["flashpoint"]


def test_no_import_cycle_of_either_kind(graph: Graph) -> None:
    cycles = find_cycles(graph.edges())
    assert not cycles, "import cycles (lazy imports inside functions count):\n" + "\n".join(map(_show, cycles))
    typed = find_cycles(graph.edges(with_type_only=True))
    assert not typed, "import cycles closed by TYPE_CHECKING imports:\n" + "\n".join(map(_show, typed))


def test_every_unit_has_its_place_in_the_order(graph: Graph) -> None:
    units = {unit(module) for module in graph.modules}
    assert units == set(ORDER), f"place new units in ORDER (and the map's table): {sorted(units ^ set(ORDER))}"
    assert set(TIERS) == set(ORDER)


def test_imports_run_down_the_layers(graph: Graph) -> None:
    """Every import between units, at module level, inside a function or for types only, goes down ``ORDER``; the
    seams are the only imports up, and they are lazy."""
    rank = {name: number for number, name in enumerate(ORDER)}
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.edges(with_type_only=True).items()
        for target in targets
        if rank[unit(module)] < rank[unit(target)] and (module, target) not in SEAMS
    )
    assert not upward, "imports up the layers (docs/architecture.md, Layers):\n" + "\n".join(upward)
    eager_seams = sorted(f"{m} -> {t}" for m, t in SEAMS if t in graph.eager.get(m, set()))
    assert not eager_seams, "a seam must import inside a function, when first used:\n" + "\n".join(eager_seams)


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows of the first Markdown table under ``heading`` (cells stripped of spaces and backticks)."""
    assert heading + "\n" in text, f"docs/architecture.md has no {heading!r} section"
    section = text.split(heading + "\n", 1)[1]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if set(cells[0]) - set("-: "):
            rows.append(cells)
    return rows[1:]  # the header


def test_the_map_shows_these_layers_and_seams() -> None:
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    layers = _table(text, "## Layers")
    assert [row[1] for row in layers] == list(ORDER), "docs/architecture.md's Layers table is not ORDER, bottom first"
    assert [row[0] for row in layers] == [str(n) for n in range(1, len(ORDER) + 1)]
    assert {row[1]: row[2] for row in layers} == TIERS
    seams = _table(text, "### Seams")
    assert {
        ("flashpoint." + row[0], "flashpoint." + row[1] if row[1] != "flashpoint" else row[1]) for row in seams
    } == (SEAMS)


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
    assert graph.eager == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.sub.d": {"pkg.c", "pkg.sub.e"}}
    assert find_cycles(graph.edges()) == [["pkg.sub.d", "pkg.sub.e", "pkg.sub.d"]]
    assert find_cycles(graph.edges(with_type_only=True)) == [
        ["pkg.a", "pkg.b", "pkg.c", "pkg.a"],
        ["pkg.sub.d", "pkg.sub.e", "pkg.sub.d"],
    ]
