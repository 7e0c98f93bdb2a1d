"""A project folder's files: which files a project has (its ``.gitignore``/``.flashignore`` rules and Flash's folder
defaults; never ``.env``), for the project loader (``hosting.project``), ``flashpoint dev``'s watcher and the deploy
packer (``hosting.artifacts``).

Apart from the loader so that packing a folder (``flashpoint.deploy``) loads no endpoint code, nor the discovery and
the ``runpod_flash`` alias that loading needs. Standard library and pathspec only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pathspec

__all__ = ["IGNORE_FILES", "SKIPPED_DIRS", "Ignore", "is_project_path", "project_files", "project_tree", "skipped_dir"]

#: the project loader's logger: the warnings about ignore files are the loader's, wherever they are read
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


def skipped_dir(path: Path) -> bool:
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
            if not skipped_dir(Path(folder) / d) and not ignore.ignored(rel, is_dir=True):
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
        if skipped_dir(folder) or ignore.ignored(rel, is_dir=True):
            return False
        ignore.entered(rel)
    return not ignore.ignored("/".join(parts))
