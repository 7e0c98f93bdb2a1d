"""Which Runpod SDK 2.x Apps a project folder declares, read without importing it: ``flashpoint deploy`` deploys each
as its own app (decision 0108), as rc2's ``rp flash deploy`` does, and runs no project code on the deployer's laptop.

An App is a module-level call ``App("name")`` (or ``runpod.App(...)``, ``App(name="name", env="staging")``) whose name
and ``env`` are string literals, in a file ``flashpoint deploy`` would ship (``projectfiles``). An App named otherwise
(computed at import) is not seen here: deploy it with ``--app``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from flashpoint.hosting.projectfiles import project_files

__all__ = ["DEFAULT_APP_ENV", "DeclaredApp", "declared_apps", "apps_in"]

#: an App's environment when it names none (rc2's ``App(name, env="default")``)
DEFAULT_APP_ENV = "default"


@dataclass(frozen=True, slots=True)
class DeclaredApp:
    """An App a file declares: its name and environment, and the file (relative to the project)."""

    name: str
    env: str
    file: str


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _app_call(node: ast.AST) -> tuple[str, str] | None:
    """``(name, env)`` of an ``App(...)`` call with literal arguments, else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called != "App":
        return None
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}
    name = _literal(node.args[0]) if node.args else _literal(keywords.get("name"))
    env = _literal(keywords["env"]) if "env" in keywords else DEFAULT_APP_ENV
    return (name, env) if name and env else None


def apps_in(source: str | bytes, file: str = "") -> list[DeclaredApp]:
    """The Apps a module's top level declares (assignments and bare calls), in order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []  # the server's load says what is wrong with it
    found = []
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.Expr) else None
        call = _app_call(value) if value is not None else None
        if call is not None:
            found.append(DeclaredApp(call[0], call[1], file))
    return found


def declared_apps(root: Path) -> list[DeclaredApp]:
    """Every App the project's files declare, each name once (its first declaration), in file order."""
    seen: dict[str, DeclaredApp] = {}
    for path in project_files(root):
        try:
            source = path.read_bytes()
        except OSError:
            continue
        if b"App" not in source:
            continue
        for app in apps_in(source, path.relative_to(root).as_posix()):
            seen.setdefault(app.name, app)
    return list(seen.values())
