"""A project folder: which files it has (ignore rules) and which endpoints each file declares.

One loader for ``flashpoint serve DIR`` and ``flashpoint dev DIR`` (and the ``deploy`` of issue 22):

- *Files*: ``.gitignore`` files (the folder's and nested ones) and ``.flashignore``, read with gitignore semantics
  whether or not the folder is a git repository, plus Flash's defaults (``SKIPPED_DIRS``, hidden entries, virtual
  environments); ``.env`` never counts (``projectfiles``, re-exported here).
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

from flashpoint.errors import ConfigError, Error
from flashpoint.hosting.discovery import AnyEndpoint, load_endpoints, load_module, module_name
from flashpoint.hosting.projectfiles import (
    IGNORE_FILES,
    SKIPPED_DIRS,
    Ignore,
    is_project_path,
    project_files,
    project_tree,
    skipped_dir,
)
from flashpoint.runpodapps.handles import ApiHandle, FunctionHandle
from flashpoint.runpodapps.serving import ApiEndpoint
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
        if not any(skipped_dir(root.joinpath(*parts[: i + 1])) for i in range(len(parts) - 1)):
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
#: what declares a Runpod SDK 2.x resource, by the decorator's last name (``@app.queue(...)``, ``@app.api``, ...)
_APP_DECLARERS = frozenset({"queue", "api", "task"})


def _endpoint_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    names = []
    while isinstance(target, ast.Attribute):
        names.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        names.append(target.id)
    return bool(names) and (
        names[0] in _DECLARERS or names[-1] in _DECLARERS or (len(names) > 1 and names[0] in _APP_DECLARERS)
    )


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
    if isinstance(handle, ApiEndpoint):  # Runpod SDK 2.x's @app.api: its class's or factory's module
        return _module_of(handle.__wrapped__)
    if is_route_endpoint(handle):
        modules = {_module_of(fn) for _, _, fn in route_table(handle)}
        return modules.pop() if len(modules) == 1 else None
    return None


def _declares(module: ModuleType) -> bool:
    return any(isinstance(v, EndpointFunction | EndpointClass | EndpointCommand | FunctionHandle | ApiHandle)
               or is_route_endpoint(v) for v in vars(module).values())  # fmt: skip


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
