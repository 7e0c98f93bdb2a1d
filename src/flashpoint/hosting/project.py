"""A project folder: which files it has (ignore rules) and which endpoints each file declares.

One loader for ``flashpoint serve DIR`` and ``flashpoint dev DIR`` (and the ``deploy`` of issue 22):

- *Files*: ``.gitignore`` files (the folder's and nested ones) and ``.flashignore``, read with gitignore semantics
  whether or not the folder is a git repository, plus Flash's defaults (``SKIPPED_DIRS``, hidden entries, virtual
  environments); ``.env`` never counts.
- *Top-level work*: a file whose top level would run work (``asyncio.run(main())`` outside
  ``if __name__ == "__main__":``) is read with ``ast``, never imported, and named in one warning (``runs_work``).
- *Ownership*: an endpoint belongs to the file that declares it (its function's or class's module), not to a file
  that imports it (``declaring_module``).

Loading goes through ``discovery`` (so ``runpod_flash`` is flashpoint while a file imports). Imports the endpoint
handles and the route declarations, never the HTTP layer.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pathspec

from flashpoint.errors import ConfigError, Error
from flashpoint.hosting.discovery import AnyEndpoint, load_endpoints, load_module, module_name
from flashpoint.sdk.endpoint import EndpointClass, EndpointCommand, EndpointFunction
from flashpoint.sdk.routes import is_route_endpoint, route_table
from flashpoint.spec import WorkerTarget

__all__ = [
    "IGNORE_FILES",
    "SKIPPED_DIRS",
    "Ignore",
    "Project",
    "SourceFile",
    "declaring_module",
    "forget_modules",
    "is_project_path",
    "load_project",
    "project_files",
    "project_tree",
    "runs_work",
    "same_endpoint",
    "target_of",
]

log = logging.getLogger("flashpoint.project")

#: folders never scanned, at any depth (Flash's built-in ignore list, less files it already skips by suffix); hidden
#: folders and virtual environments (a ``pyvenv.cfg``) are skipped too
SKIPPED_DIRS = frozenset({"__pycache__", "tests", "docs", "dist", "build", "venv", "env", "node_modules"})
#: the files holding a project's own ignore rules, gitignore syntax (``.gitignore`` also in any folder below)
IGNORE_FILES = (".gitignore", ".flashignore")
#: files that are never an app's
_NOT_APPS = frozenset({"__init__.py", "conftest.py"})


# --------------------------------------------------------------------------------------------------------------------
# Files


class Ignore:
    """A project's ignore rules: every ``.gitignore`` (each applies below its own folder, as git reads them) and the
    root's ``.flashignore``, read as files; ``.env`` is always ignored. A negation (``!keep.py``) re-includes within
    its own file's rules; a folder left out is not entered, as in git."""

    def __init__(self, root: Path) -> None:
        self.root = root
        #: (folder relative to root, "" for the root; its rules)
        self._specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []
        self._read("")

    def _read(self, folder: str) -> None:
        lines: list[str] = []
        names = IGNORE_FILES if not folder else IGNORE_FILES[:1]  # .flashignore is the project's, at its root
        for name in names:
            path = self.root / folder / name
            try:
                lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:  # absent, or a folder of that name
                continue
        if lines:
            self._specs.append((folder, pathspec.GitIgnoreSpec.from_lines(_valid(lines, self.root / folder))))

    def entered(self, folder: str) -> None:
        """Read the ``.gitignore`` of a folder (relative, posix) the walk has just entered."""
        if folder:
            self._read(folder)

    def ignored(self, rel: str, *, is_dir: bool = False) -> bool:
        """Whether the path (relative to the root, posix) is left out by the rules (not by Flash's defaults)."""
        if not is_dir and Path(rel).name == ".env":
            return True
        for folder, spec in self._specs:
            if folder and not rel.startswith(folder + "/"):
                continue
            inner = rel[len(folder) + 1 :] if folder else rel
            if spec.match_file(inner + "/" if is_dir else inner):
                return True
        return False


#: the unreadable patterns already warned about, by folder
_WARNED: set[tuple[Path, tuple[str, ...]]] = set()


def _valid(lines: list[str], folder: Path) -> list[str]:
    """The lines that are patterns git can read: git ignores one it cannot (a lone ``!``, a trailing backslash, a
    reversed range), and so does the loader, with a warning naming them."""
    kept: list[str] = []
    bad: list[str] = []
    for line in lines:
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except Exception:  # pathspec's own error, or re.error for a range the regex engine refuses
            bad.append(line)
        else:
            kept.append(line)
    if bad and (folder, tuple(bad)) not in _WARNED:
        _WARNED.add((folder, tuple(bad)))  # the rules are read again on each reload and change: say it once
        log.warning("ignoring %d unreadable pattern(s) in the ignore files of %s: %s", len(bad), folder,
                    ", ".join(repr(line) for line in bad[:5]))  # fmt: skip
    return kept


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return (
        name.startswith(".")
        or name in SKIPPED_DIRS
        or name.endswith(".egg-info")
        or (path / "pyvenv.cfg").is_file()  # a virtual environment, whatever its name
    )


def _skipped_file(name: str) -> bool:
    # hidden files: editors' lock and swap files
    return not name.endswith(".py") or name.startswith((".", "test_")) or name.endswith("_test.py") or name in _NOT_APPS


def _walk(root: Path) -> Iterator[tuple[str, str]]:
    """``(folder, name)`` (folder relative to root, posix, "" for the root) of every file that is not ignored."""
    ignore = Ignore(root)
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root).as_posix()
        here = "" if here == "." else here
        ignore.entered(here)
        kept = []
        for d in sorted(dirs):
            rel = f"{here}/{d}" if here else d
            if not _skipped_dir(Path(folder) / d) and not ignore.ignored(rel, is_dir=True):
                kept.append(d)
        dirs[:] = kept
        for name in files:
            if not ignore.ignored(f"{here}/{name}" if here else name):
                yield here, name


def project_files(root: Path) -> list[Path]:
    """The ``.py`` files a project loads, in path order: not ``__init__.py``, tests (``test_*.py``, ``*_test.py``,
    ``conftest.py``), hidden files, files its ``.gitignore``/``.flashignore`` rules leave out, nor anything in a
    skipped folder (``SKIPPED_DIRS``, hidden folders, ``*.egg-info``, virtual environments, ignored folders)."""
    found = [root / folder / name for folder, name in _walk(root) if not _skipped_file(name)]
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def project_tree(root: Path) -> list[Path]:
    """Every file of the project, in path order, as ``deploy`` will pack it: what the ignore rules and Flash's
    folder defaults (``SKIPPED_DIRS``, hidden folders such as ``.git``, ``*.egg-info``, virtual environments) keep;
    never ``.env``, nor a link that leads outside the folder (it could name any file of this user's)."""
    root = root.resolve()
    found: list[Path] = []
    for folder, name in _walk(root):
        path = root / folder / name
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            continue
        found.append(path)
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def is_project_path(root: Path, path: Path) -> bool:
    """Whether ``path`` (existing or just deleted) is one of the files ``project_files`` would list (the ignore rules
    are read again: call it per change, not per file of a walk)."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    if not parts or _skipped_file(parts[-1]):
        return False
    ignore = Ignore(root)
    folder = root
    for i, part in enumerate(parts[:-1]):
        folder = folder / part
        rel = "/".join(parts[: i + 1])
        if _skipped_dir(folder) or ignore.ignored(rel, is_dir=True):
            return False
        ignore.entered(rel)
    return not ignore.ignored("/".join(parts))


def forget_modules(root: Path) -> list[str]:
    """Remove the project's modules (files under ``root`` outside skipped folders; never flashpoint's own) from
    ``sys.modules``, so the next import reads every file again; returns their names."""
    inside = str(root) + os.sep
    gone: list[str] = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file.startswith(inside) or name.partition(".")[0] == "flashpoint":
            continue
        parts = Path(file).relative_to(root).parts
        if not any(_skipped_dir(root.joinpath(*parts[: i + 1])) for i in range(len(parts) - 1)):
            del sys.modules[name]
            gone.append(name)
    return gone


# --------------------------------------------------------------------------------------------------------------------
# Top-level work

#: modules whose ``run`` starts an event loop and runs a coroutine to its end
_RUNNERS = frozenset({"asyncio", "anyio", "trio", "uvloop"})
#: an event loop's methods that run work
_LOOP_RUNS = frozenset({"run_until_complete", "run_forever"})


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def _shallow(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what runs with it: not the bodies of functions, lambdas and classes (their decorators, default
    values and bases do run)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        for part in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
            if part is not None:
                yield from _shallow(part)
        return
    if isinstance(node, ast.ClassDef):
        for part in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            yield from _shallow(part)
        return
    if isinstance(node, ast.Lambda):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _shallow(child)


#: ``try``, and ``try``/``except*`` where Python has it (3.11)
_TRY: tuple[type[Any], ...] = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run on import: into ``if``/``try``/``with``/loops, not into a ``__main__`` guard's body
    (its ``else`` runs on import)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not _is_main_guard(stmt.test):
                yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
            yield ast.Expr(stmt.test, lineno=stmt.lineno, col_offset=stmt.col_offset)
        elif isinstance(stmt, _TRY):
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                yield from _top_level(block)
        elif isinstance(stmt, ast.AsyncWith | ast.AsyncFor):
            yield stmt  # `async with`/`async for` at module level: a loop is running
        elif isinstance(stmt, ast.With | ast.For | ast.While):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse if not isinstance(stmt, ast.With) else [])
            for part in _heads(stmt):
                yield ast.Expr(part, lineno=stmt.lineno, col_offset=stmt.col_offset)
        else:
            yield stmt


def _heads(stmt: ast.With | ast.For | ast.While) -> list[ast.expr]:
    if isinstance(stmt, ast.With):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.For):
        return [stmt.iter]
    return [stmt.test]


def _callee(call: ast.Call) -> tuple[str | None, str | None]:
    """``(base name, attribute)``: ``asyncio.run`` is ("asyncio", "run"), ``main`` is ("main", None), ``a.b.c`` is
    ("a", "c"); (None, attribute) when the base is no name (``get_loop().run_forever``)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id, None
    if isinstance(func, ast.Attribute):
        base: ast.expr = func.value
        while isinstance(base, ast.Attribute):
            base = base.value
        return (base.id if isinstance(base, ast.Name) else None), func.attr
    return None, None


#: what declares an endpoint, by the decorator's first or last name (``@Endpoint(...)``, ``@flashpoint.Endpoint``,
#: Flash's older ``@remote(config)``)
_DECLARERS = frozenset({"Endpoint", "remote"})


def _endpoint_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    names = []
    while isinstance(target, ast.Attribute):
        names.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        names.append(target.id)
    return bool(names) and (names[0] in _DECLARERS or names[-1] in _DECLARERS)


def _work_in(nodes: Iterator[ast.AST], runners: set[str], endpoints: set[str], workers: set[str]) -> str | None:
    for node in nodes:
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Await | ast.AsyncFor | ast.AsyncWith):
            return f"line {line} awaits at module level"
        if not isinstance(node, ast.Call):
            continue
        base, attr = _callee(node)
        if attr in _LOOP_RUNS or (attr == "run" and base in _RUNNERS) or (attr is None and base in runners):
            return f"line {line} runs an event loop ({ast.unparse(node.func)}(...))"
        if base in endpoints:
            return f"line {line} calls the endpoint {base!r}"
        if attr is None and base in workers:
            return f"line {line} calls {base}(), which runs work"
    return None


def runs_work(source: str | bytes) -> str | None:
    """Why importing ``source`` would run work, read from its syntax without running it; None when it only declares.

    Work, outside ``if __name__ == "__main__":`` (its ``else`` does run) and outside the bodies of functions, lambdas
    and classes: an ``await`` (``async for``, ``async with``), an event loop run (``asyncio.run``, ``anyio.run``,
    ``trio.run``, ``uvloop.run``, ``run`` imported from one of them, ``.run_until_complete``, ``.run_forever``), a
    call of one of the file's decorated functions or classes (an endpoint: ``infer(...)``, ``infer.run(...)``), or a
    call of one of its own plain functions whose body does one of these (``main()``, through others too).
    Everything else (imports, assignments, ``Endpoint(...)``, ``logging.basicConfig()``, decorators, a model loaded
    at import) is declaring: the check is conservative, so that no endpoint file is skipped. A file that does not
    parse is left to its import, which reports the error."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    runners: set[str] = set()
    endpoints: set[str] = set()
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for stmt in _top_level(tree.body):
        if isinstance(stmt, ast.ImportFrom) and stmt.module in _RUNNERS:
            runners.update(alias.asname or alias.name for alias in stmt.names if alias.name == "run")
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if any(_endpoint_decorator(d) for d in stmt.decorator_list):
                endpoints.add(stmt.name)
            elif not isinstance(stmt, ast.ClassDef):
                functions[stmt.name] = stmt
    # a plain function does work when its body (not nested definitions) does, or calls one that does
    workers: set[str] = set()
    grown = True
    while grown:
        grown = False
        for name, fn in functions.items():
            if name in workers:
                continue
            body = (node for stmt in fn.body for node in _shallow(stmt))
            if _work_in(body, runners, endpoints, workers) is not None and not isinstance(fn, ast.AsyncFunctionDef):
                workers.add(name)
                grown = True
    statements = (node for stmt in _top_level(tree.body) for node in _shallow(stmt))
    return _work_in(statements, runners, endpoints, workers)


# --------------------------------------------------------------------------------------------------------------------
# Loading


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One project file as last loaded. A file that fails to import keeps what it declared when it last loaded
    (``endpoints``, ``digest``, ``uses``), with the failure in ``error``; a file not imported because its top level
    runs work declares nothing, with the reason in ``skipped``."""

    rel: str
    #: the module name it was imported under ("gpu_worker"; the dotted name inside a package)
    module: str
    #: sha256 of the source that ``endpoints`` came from
    digest: str
    #: the endpoints this file declares (not those it imports from another project file), by name
    endpoints: Mapping[str, AnyEndpoint] = field(default_factory=dict)
    #: how a worker loads each endpoint, taken when the file loaded (a route endpoint's import path names the module
    #: object of that load)
    targets: Mapping[str, WorkerTarget] = field(default_factory=dict)
    #: the other project files whose module it refers to at module level (``import x``, ``from x import y``)
    uses: frozenset[str] = frozenset()
    error: str | None = None
    #: why the file was not imported (``runs_work``'s reason), else None
    skipped: str | None = None

    @property
    def prefix(self) -> str:
        """The file's URL prefix: its path without ``.py`` (``/workers/gpu``)."""
        return "/" + self.rel.removesuffix(".py")


@dataclass(frozen=True, slots=True)
class Project:
    """A project folder as loaded: its files in path order, each with what it declares."""

    root: Path
    files: tuple[SourceFile, ...]

    @property
    def errors(self) -> list[tuple[str, str]]:
        """``(file, error)`` for each file that failed to load this time."""
        return [(f.rel, f.error) for f in self.files if f.error is not None]

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """``(file, reason)`` for each file not imported because its top level runs work."""
        return [(f.rel, f.skipped) for f in self.files if f.skipped is not None]

    def endpoints(self) -> dict[str, tuple[AnyEndpoint, WorkerTarget]]:
        """Every endpoint with its worker's target, by name, in file order (``serve DIR``).

        Raises:
            ConfigError: a file failed to load, or two files declare endpoints of one name with other options.
        """
        if self.errors:
            failed = "\n".join(f"  {rel}: {error}" for rel, error in self.errors)
            raise ConfigError(f"these files of {self.root} failed to load:\n{failed}")
        found: dict[str, tuple[AnyEndpoint, WorkerTarget]] = {}
        first: dict[str, str] = {}
        for source in self.files:
            for name, handle in source.endpoints.items():
                known = found.get(name)
                if known is None:
                    found[name], first[name] = (handle, source.targets[name]), source.rel
                elif not same_endpoint(known[0], handle):
                    raise ConfigError(
                        f"{source.rel} and {first[name]} both declare an endpoint named {name!r} with other options; "
                        "give each its own name="
                    )
        return found


def same_endpoint(a: Any, b: Any) -> bool:
    """Whether two handles are one endpoint: the same object, or functions declared with one name and the same
    options (one ``Shared`` group)."""
    if a is b:
        return True
    shared = getattr(a, "shared", None)
    return shared is not None and shared is getattr(b, "shared", None)


def _module_of(value: Any) -> str | None:
    if isinstance(value, ModuleType):
        return value.__name__
    try:
        name = getattr(value, "__module__", None)
    except Exception:  # a lazy object's attribute access may run anything
        return None
    return name if isinstance(name, str) else None


def declaring_module(handle: Any) -> str | None:
    """The module that declares an endpoint: its function's or class's (``__wrapped__``), or its routes' functions'
    when they are all of one module; None for a worker command (no code of its own) or routes of several modules."""
    if isinstance(handle, EndpointFunction | EndpointClass):
        return _module_of(handle.__wrapped__)
    if isinstance(handle, EndpointCommand):
        return None
    if is_route_endpoint(handle):
        modules = {_module_of(fn) for _, _, fn in route_table(handle)}
        return modules.pop() if len(modules) == 1 else None
    return None


def _declares(module: ModuleType) -> bool:
    return any(isinstance(v, EndpointFunction | EndpointClass | EndpointCommand) or is_route_endpoint(v)
               for v in vars(module).values())  # fmt: skip


def target_of(handle: Any) -> WorkerTarget:
    """How a worker loads an endpoint (its import path, a pickled table, or its command): taken while the module
    that declares it is the one in ``sys.modules``."""
    target: WorkerTarget = handle.worker_target()
    return target


def _imports(tree: ast.Module, module: str) -> set[str]:
    """The module names that a file's imports running on import name (and their parents; not those inside functions);
    a relative import is resolved against the file's own dotted name ``module``."""
    names: set[str] = set()
    for node in (node for stmt in _top_level(tree.body) for node in _shallow(stmt)):
        found = []
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = module.split(".")[: -node.level] if node.level else []
            if node.level and not package:
                continue  # beyond the top-level package: the import itself fails
            base = ".".join([*package, *([node.module] if node.module else [])])
            found = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for name in found:
            parts = name.split(".")
            names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return names


def _screen(root: Path, paths: list[Path]) -> dict[str, str]:
    """The files (relative) not to import, with why: their top level runs work, or they import (statically) a project
    file that is not imported, which would run it."""
    modules: dict[str, str] = {}
    imports: dict[str, set[str]] = {}
    skipped: dict[str, str] = {}
    for path in paths:
        rel = path.relative_to(root).as_posix()
        try:
            source = path.read_bytes()
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue  # the import reports it
        name = module_name(path.resolve())[1]
        modules[name] = rel
        imports[rel] = _imports(tree, name)
        reason = runs_work(source)
        if reason is not None:
            skipped[rel] = reason
    grown = True
    while grown:
        grown = False
        for rel, names in imports.items():
            if rel in skipped:
                continue
            hit = next((name for name in sorted(names) if modules.get(name) in skipped), None)
            if hit is not None:
                skipped[rel] = f"it imports {modules[hit]}, which is not imported ({skipped[modules[hit]]})"
                grown = True
    return skipped


def load_project(root: Path, previous: Project | None = None) -> Project:
    """Import every project file afresh (``forget_modules`` first) through discovery, and collect what each declares.

    A file whose top level runs work (``runs_work``), or that imports one, is not imported: it declares nothing and
    one warning names every such file not skipped by ``previous`` already. An endpoint is listed under the file that
    declares it (``declaring_module``); one declared outside the project (an installed package, a worker command) under
    each file holding it. A file that fails keeps its last good version from ``previous``; its error is recorded,
    never raised."""
    root = root.resolve()
    forget_modules(root)
    before = {f.rel: f for f in previous.files} if previous is not None else {}
    paths = project_files(root)
    screened = _screen(root, paths)
    loaded: list[tuple[SourceFile, ModuleType | None]] = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if rel in screened:
                loaded.append((SourceFile(rel, "", digest, skipped=screened[rel]), None))
                continue
            module = load_module(str(path))
            endpoints = load_endpoints(str(path)) if _declares(module) else {}
        except (Error, OSError) as exc:
            loaded.append((_failed(rel, before.get(rel), exc), None))
            continue
        loaded.append((SourceFile(rel, module.__name__, digest, endpoints), module))
    _warn_skipped(root, [(f.rel, f.skipped) for f, _ in loaded if f.skipped is not None], before)
    for source, fresh in loaded:
        for handle in source.endpoints.values() if fresh is not None else ():
            _drop_stale(handle)
    files = {f.module: f.rel for f, _ in loaded if f.module}
    result: list[SourceFile] = []
    for source, loaded_module in loaded:
        if loaded_module is not None:
            own = {name: handle for name, handle in source.endpoints.items()
                   if declaring_module(handle) == source.module or declaring_module(handle) not in files}  # fmt: skip
            try:  # a target pickles code for a shared name or routes from several modules: that may fail
                targets = {name: target_of(handle) for name, handle in own.items()}
            except Exception as exc:
                result.append(_failed(source.rel, before.get(source.rel), exc))
                continue
            names = {_module_of(value) for value in list(vars(loaded_module).values())}
            uses = frozenset(files[name] for name in names if name in files and files[name] != source.rel)
            source = dataclasses.replace(source, endpoints=own, targets=targets, uses=uses)
        result.append(source)
    return Project(root, tuple(result))


def _warn_skipped(root: Path, skipped: list[tuple[str, str]], before: Mapping[str, SourceFile]) -> None:
    new = [(rel, why) for rel, why in skipped if before.get(rel) is None or before[rel].skipped is None]
    if not new:
        return
    listed = "; ".join(f"{rel}: {why}" for rel, why in new)
    log.warning(
        "not loading %d file(s) of %s, whose top level would run work when imported (%s); to have one loaded, move "
        "that code under `if __name__ == \"__main__\":` or into a function; to silence this, list the file in "
        ".flashignore",
        len(new), root, listed,
    )  # fmt: skip


def _drop_stale(handle: Any) -> None:
    """Members of a shared endpoint name (``endpoint.Shared``) declared by an earlier load of a file leave it: the
    functions and classes of one name and the same options join one group, so a function renamed or removed since
    would otherwise stay one of the endpoint's targets (in its calls, its input checks and its workers' table) until
    its old handle is garbage collected."""
    shared = getattr(handle, "shared", None)
    if shared is None:
        return
    for name, member in list(shared.members.items()):
        obj = getattr(member, "__wrapped__", None)
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        if module is None or not any(value is member for value in vars(module).values()):
            del shared.members[name]


def _failed(rel: str, kept: SourceFile | None, exc: BaseException) -> SourceFile:
    error = str(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
    if kept is None:
        return SourceFile(rel, "", "", error=error)
    return dataclasses.replace(kept, error=error)
