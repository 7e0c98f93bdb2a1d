"""hosting/appscan.py: which Runpod SDK 2.x Apps a project folder declares, read with ``ast`` (nothing imported): a
table of sources for ``apps_in``, and ``declared_apps`` over real folders with ``.gitignore``/``.flashignore`` rules."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from flashpoint.hosting.appscan import DEFAULT_APP_ENV, DeclaredApp, apps_in, declared_apps

SOURCES = [
    pytest.param('from runpod import App\napp = App("x")\n', [("x", "default")], id="App(name) assigned"),
    pytest.param('import runpod\napp = runpod.App("x", env="staging")\n', [("x", "staging")], id="runpod.App env"),
    pytest.param('from runpod import App\napp = App(name="x")\n', [("x", "default")], id="name keyword"),
    pytest.param('app = App(name="x", env="prod")\n', [("x", "prod")], id="both keywords"),
    pytest.param('from runpod import App\nApp("bare")\n', [("bare", "default")], id="a bare call"),
    pytest.param('app: App = App("typed")\n', [("typed", "default")], id="annotated assignment"),
    pytest.param('a = App("one")\nb = App("two", env="e")\n', [("one", "default"), ("two", "e")], id="in order"),
    pytest.param('import runpod.apps\napp = runpod.apps.App("deep")\n', [("deep", "default")], id="dotted"),
    pytest.param('NAME = "x"\napp = App(NAME)\n', [], id="non-literal name"),
    pytest.param('app = App(f"x-{1}")\n', [], id="f-string name"),
    pytest.param('ENV = "e"\napp = App("x", env=ENV)\n', [], id="non-literal env"),
    pytest.param('app = App("")\n', [], id="empty name"),
    pytest.param('app = App("x", env="")\n', [], id="empty env"),
    pytest.param("app = App()\n", [], id="no name"),
    pytest.param("app = App(1)\n", [], id="a number"),
    pytest.param('app = Application("x")\napp2 = make_app("y")\n', [], id="other callables"),
    pytest.param('def build():\n    return App("inside")\n', [], id="call inside a function"),
    pytest.param('class Holder:\n    app = App("in-class")\n', [], id="call inside a class"),
    pytest.param('if True:\n    app = App("in-if")\n', [], id="call inside a block"),
    pytest.param('apps = [App("in-list")]\n', [], id="nested in an expression"),
    pytest.param('app = App("x"\n', [], id="syntax error"),
    pytest.param(b'app = App("x")\x00\n', [], id="null byte"),
]


@pytest.mark.parametrize(("source", "expected"), SOURCES)
def test_apps_in(source: str | bytes, expected: list[tuple[str, str]]) -> None:
    found = apps_in(source, "main.py")
    assert [(app.name, app.env) for app in found] == expected
    assert all(app.file == "main.py" for app in found)


def test_an_app_without_env_is_in_rc2s_default_environment() -> None:
    assert DEFAULT_APP_ENV == "default"
    assert apps_in('App("x")', "a.py") == [DeclaredApp("x", "default", "a.py")]


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_declared_apps_walks_the_project_files_in_path_order(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "main.py": 'from runpod import App\napp = App("shop", env="staging")\n',
            "pkg/workers.py": 'import runpod\nbatch = runpod.App("batch")\n',
            "pkg/__init__.py": 'App("from-init")\n',  # never an app's file (projectfiles)
            "tests/test_main.py": 'App("from-tests")\n',  # tests are not the project's code
            "docs/example.py": 'App("from-docs")\n',
            "helpers.py": "def helper() -> int:\n    return 1\n",  # no App at all
            "notes.txt": 'App("not-python")\n',
        },
    )

    assert declared_apps(tmp_path) == [
        DeclaredApp("shop", "staging", "main.py"),
        DeclaredApp("batch", "default", "pkg/workers.py"),
    ]


def test_the_first_declaration_of_a_name_wins(tmp_path: Path) -> None:
    # path order: a.py before b.py before sub/c.py
    write(
        tmp_path,
        {
            "a.py": 'one = App("one")\n',
            "b.py": 'again = App("one", env="prod")\ntwo = App("two", env="e2")\ntwo_more = App("two")\n',
            "sub/c.py": 'App("three")\nApp("one", env="other")\n',
        },
    )

    assert declared_apps(tmp_path) == [
        DeclaredApp("one", "default", "a.py"),
        DeclaredApp("two", "e2", "b.py"),
        DeclaredApp("three", "default", "sub/c.py"),
    ]


@pytest.mark.timeout(20)
def test_ignored_files_are_neither_listed_nor_read(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".gitignore": "ignored.py\nbuild_out/\nfifo_app.py\n",
            ".flashignore": "private/\n",
            "main.py": 'App("kept")\n',
            "ignored.py": 'App("aaa-ignored-by-gitignore")\n',
            "build_out/gen.py": 'App("aaa-in-ignored-folder")\n',
            "private/secret.py": 'App("aaa-flashignored")\n',
            "nested/.gitignore": "local.py\n",
            "nested/local.py": 'App("aaa-nested-gitignore")\n',
            "nested/ok.py": 'App("nested-kept")\n',
        },
    )
    # an ignored file that cannot be read without blocking: a named pipe no one writes to. Opening it for reading
    # waits for a writer, so a scan that read ignored files would hang here (and the timeout fail the test).
    os.mkfifo(tmp_path / "fifo_app.py")

    assert declared_apps(tmp_path) == [
        DeclaredApp("kept", "default", "main.py"),
        DeclaredApp("nested-kept", "default", "nested/ok.py"),
    ]


def test_a_file_that_does_not_parse_is_skipped_and_the_rest_are_found(tmp_path: Path) -> None:
    write(tmp_path, {"broken.py": 'App("broken"\n', "good.py": 'App("good")\n'})

    assert declared_apps(tmp_path) == [DeclaredApp("good", "default", "good.py")]


def test_an_empty_folder_declares_nothing(tmp_path: Path) -> None:
    assert declared_apps(tmp_path) == []
