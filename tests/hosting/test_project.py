"""The project loader (``hosting.project``) on real files in temporary folders: the top-level-work check by table,
``.gitignore``/``.flashignore`` rules (nested, negated, folders, ``.env``) with no git repository, ownership of an
endpoint by the file that declares it, ``serve``'s loading of a folder (``load_target``), and a real ``flashpoint
serve DIR`` process serving a folder of two files."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from flashpoint.errors import ConfigError
from flashpoint.hosting.project import (
    Ignore,
    declaring_module,
    is_project_path,
    load_project,
    project_files,
    project_tree,
    runs_work,
)
from flashpoint.hosting.server import load_target
from tests.conftest import Served

HEAD = "from flashpoint import Endpoint, GpuGroup\n"
#: a file that must never be imported: importing it fails the load
NEVER = 'raise SystemExit("the loader imported a file it must not")\n'


def gpu_fn(endpoint: str, fn: str = "process", body: str = "return x") -> str:
    return f'\n@Endpoint(name="{endpoint}", gpu=GpuGroup.ANY)\nasync def {fn}(x: int):\n    {body}\n'


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def project(tmp_path: Path, restore_imports: None) -> Callable[[dict[str, str]], Path]:
    """Write a project's files under tmp_path/proj; its modules and sys.path entries go at teardown."""
    return lambda files: write(tmp_path / "proj", files)


def rels(root: Path) -> list[str]:
    return [path.relative_to(root).as_posix() for path in project_files(root)]


# --------------------------------------------------------------------------------------------------------------------
# Top-level work, by table

MAIN = 'if __name__ == "__main__":\n'
WORK: list[tuple[str, str, str | None]] = [
    # declaring only
    ("imports and literals", "import os\nfrom x import y\nA = 1\nB: dict = {'a': [1, 2]}\n", None),
    ("an endpoint declared", HEAD + gpu_fn("e"), None),
    ("a route endpoint", HEAD + 'api = Endpoint(name="api")\n@api.post("/c")\nasync def c(x: int):\n    return x\n',
     None),
    ("setup calls are not work", "import logging\nlogging.basicConfig()\nlog = logging.getLogger(__name__)\n"
     "from dotenv import load_dotenv\nload_dotenv()\nprint('hello')\n", None),
    ("a model loaded at import is the endpoint file's own business", "MODEL = load('weights.bin')\n", None),
    ("the client under the main guard", HEAD + gpu_fn("e") + "import asyncio\nasync def main():\n"
     "    print(await process(1))\n" + MAIN + "    asyncio.run(main())\n", None),
    ("the guard written the other way round", "import asyncio\nif '__main__' == __name__:\n    asyncio.run(m())\n",
     None),
    ("awaits inside functions and lambdas", "async def f():\n    await g()\nh = lambda: asyncio.run(f())\n", None),
    ("a decorated helper called at import is no endpoint",
     "import functools\n@functools.cache\ndef model():\n    return 1\nM = model()\n", None),
    ("a plain function that does no work, called", "def setup():\n    return 1\nsetup()\n", None),
    ("an async function called without being run", "async def main():\n    await x()\nmain()\n", None),
    ("a file that does not parse is left to its import", "def broken(:\n", None),
    # running work
    ("asyncio.run at top level", "import asyncio\nasync def main():\n    pass\nasyncio.run(main())\n",
     "line 4 runs an event loop (asyncio.run(...))"),
    ("print(await ...) at top level", HEAD + gpu_fn("e") + "print(await process(1))\n", "awaits at module level"),
    ("run imported from asyncio", "from asyncio import run as go\ngo(main())\n", "runs an event loop (go(...))"),
    ("anyio.run and trio.run", "import trio\ntrio.run(main)\n", "runs an event loop (trio.run(...))"),
    ("an event loop's run_until_complete", "import asyncio\nasyncio.get_event_loop().run_until_complete(m())\n",
     "runs an event loop"),
    ("a call of the file's endpoint", HEAD + gpu_fn("e") + "job = process.run_sync(1)\n",
     "calls the endpoint 'process'"),
    ("an endpoint called inside an expression", HEAD + gpu_fn("e") + "print([process(1)])\n",
     "calls the endpoint 'process'"),
    ("a plain main() that runs a loop", "import asyncio\ndef main():\n    asyncio.run(go())\nmain()\n",
     "line 4 calls main(), which runs work"),
    ("through another plain function", "import asyncio\ndef inner():\n    asyncio.run(go())\ndef outer():\n"
     "    inner()\nouter()\n", "calls outer(), which runs work"),
    ("the main guard's else runs on import", "import asyncio\n" + MAIN + "    pass\nelse:\n    asyncio.run(m())\n",
     "runs an event loop"),
    ("inside try, with and for", "import asyncio\ntry:\n    with open('f'):\n        for i in x:\n"
     "            asyncio.run(m())\nexcept Exception:\n    pass\n", "runs an event loop"),
    ("async with at top level", "async with session() as s:\n    pass\n", "awaits at module level"),
    ("a decorator's argument runs", "import asyncio\n@wrap(asyncio.run(m()))\ndef f():\n    pass\n",
     "runs an event loop"),
    ("a Flash @remote function called", "from runpod_flash import remote\n@remote(config)\nasync def f(x):\n"
     "    return x\nprint(f(1))\n", "calls the endpoint 'f'"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "reason"), [w[1:] for w in WORK], ids=[w[0] for w in WORK])
def test_top_level_work(source: str, reason: str | None) -> None:
    found = runs_work(source)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found, found


def test_hostile_sources_are_read_not_run() -> None:
    # deep nesting, NUL bytes and undecodable bytes neither raise nor import anything
    assert runs_work("x = " + "(" * 5000 + ")" * 5000) is None
    assert runs_work(b"\x00\xff\xfe") is None
    assert runs_work("import asyncio\n" + "if x:\n    " * 1 + "asyncio.run(m())\n") is not None


# --------------------------------------------------------------------------------------------------------------------
# Ignore rules


def test_gitignore_and_flashignore_leave_files_out_without_a_git_repository(
    project: Callable[[dict[str, str]], Path],
) -> None:
    root = project({
        ".gitignore": "generated/\n*_scratch.py\n/top_only.py\n",
        ".flashignore": "drafts/\nexperiments/*.py\n!experiments/keep.py\n",
        "app.py": HEAD + gpu_fn("app"),
        "generated/g.py": NEVER, "a_scratch.py": NEVER, "sub/b_scratch.py": NEVER, "top_only.py": NEVER,
        "sub/top_only.py": "X = 1\n",  # an anchored pattern matches at the root only
        "drafts/d.py": NEVER, "experiments/e.py": NEVER, "experiments/keep.py": "Y = 1\n",
        # a nested .gitignore applies below its own folder
        "nested/.gitignore": "local.py\n", "nested/local.py": NEVER, "nested/kept.py": "Z = 1\n",
        "local.py": "W = 1\n",
        ".env": "SECRET=1\n", "sub/.env": "SECRET=2\n",
    })  # fmt: skip
    assert not (root / ".git").exists()
    assert rels(root) == ["app.py", "experiments/keep.py", "local.py", "nested/kept.py", "sub/top_only.py"]
    loaded = load_project(root)
    assert loaded.errors == [] and loaded.skipped == []
    assert [f.rel for f in loaded.files if f.endpoints] == ["app.py"]
    for rel, kept in [("app.py", True), ("generated/g.py", False), ("a_scratch.py", False), ("drafts/x.py", False),
                      ("experiments/keep.py", True), ("experiments/e.py", False), ("nested/local.py", False),
                      ("nested/kept.py", True), ("sub/top_only.py", True), ("top_only.py", False)]:  # fmt: skip
        assert is_project_path(root, root / rel) is kept, rel


def test_env_files_never_count_and_ignore_files_are_read_as_text(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_bytes(b"\xff\xfe not utf-8\n*.log\n")
    ignore = Ignore(tmp_path)
    assert ignore.ignored(".env") and ignore.ignored("deep/er/.env")
    assert ignore.ignored("x.log") and not ignore.ignored("x.py")
    assert not ignore.ignored(".env", is_dir=True)  # a folder named .env is a folder (hidden: Flash's default skips)


def test_unreadable_patterns_are_left_out_and_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="flashpoint.project")
    (tmp_path / ".gitignore").write_text("!\n[z-a]\nend\\\n*.log\n\x00\n***/x.py\n" + "a/" * 2000 + "\n")
    for name in ("a.py", "x.log", "sub/x.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert rels(tmp_path) == ["a.py"]
    (warning,) = caplog.records
    assert "3 unreadable pattern(s)" in warning.getMessage() and "'[z-a]'" in warning.getMessage()
    # read again (a reload, a change the watcher filters): said once
    assert not is_project_path(tmp_path, tmp_path / "x.log") and rels(tmp_path) == ["a.py"]
    assert len(caplog.records) == 1


def test_the_tree_deploy_packs_keeps_every_kept_file_and_no_secret(tmp_path: Path) -> None:
    root = write(tmp_path / "proj", {
        ".gitignore": "*.ckpt\n", ".flashignore": "data/raw/\n",
        "app.py": "", "requirements.txt": "torch\n", "models/config.json": "{}", "models/w.ckpt": "x",
        "data/raw/big.bin": "x", "data/small.csv": "a", ".env": "SECRET=1", "sub/.env": "SECRET=2",
        ".git/config": "", "__pycache__/a.pyc": "", ".python-version": "3.11",
    })  # fmt: skip
    outside = write(tmp_path / "home", {"id_rsa": "PRIVATE"}) / "id_rsa"
    (root / "key").symlink_to(outside)
    (root / "alias.txt").symlink_to(root / "requirements.txt")
    (root / "linked_dir").symlink_to(tmp_path / "home", target_is_directory=True)
    packed = [p.relative_to(root.resolve()).as_posix() for p in project_tree(root)]
    assert packed == [".flashignore", ".gitignore", ".python-version", "alias.txt", "app.py", "data/small.csv",
                      "models/config.json", "requirements.txt"]  # fmt: skip


def test_a_folder_named_like_an_ignore_file_is_no_rules(tmp_path: Path) -> None:
    (tmp_path / ".flashignore").mkdir()
    (tmp_path / "a.py").write_text("")
    assert rels(tmp_path) == ["a.py"]


# --------------------------------------------------------------------------------------------------------------------
# Files whose top level runs work


CLIENT = "import asyncio\nfrom gpu_worker import process\nasyncio.run(process(1))\n" + NEVER


def test_a_client_script_is_not_imported_and_named_in_one_warning(
    project: Callable[[dict[str, str]], Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flashpoint.project")
    root = project({
        "gpu_worker.py": HEAD + gpu_fn("gpu"),
        "client.py": CLIENT,
        # a file importing the client would run it: not imported either
        "uses_client.py": "import client\n" + NEVER,
        "guarded.py": HEAD + "from gpu_worker import process\nimport asyncio\n" + MAIN
        + "    asyncio.run(process(1))\n",
    })  # fmt: skip
    loaded = load_project(root)
    assert loaded.errors == []
    skipped = dict(loaded.skipped)
    assert set(skipped) == {"client.py", "uses_client.py"}
    assert "runs an event loop" in skipped["client.py"]
    assert "imports client.py" in skipped["uses_client.py"]
    assert "client" not in sys.modules and "uses_client" not in sys.modules
    (warning,) = [r for r in caplog.records if r.name == "flashpoint.project"]
    assert "client.py" in warning.getMessage() and "uses_client.py" in warning.getMessage()
    assert '__name__ == "__main__"' in warning.getMessage()
    # a reload warns again only about files newly skipped
    caplog.clear()
    load_project(root, loaded)
    assert [r for r in caplog.records if r.name == "flashpoint.project"] == []
    (root / "other_client.py").write_text("import asyncio\nasyncio.run(main())\n")
    load_project(root, loaded)
    (again,) = [r for r in caplog.records if r.name == "flashpoint.project"]
    assert "other_client.py" in again.getMessage() and "uses_client.py" not in again.getMessage()


def test_files_importing_a_skipped_file_relatively_are_skipped_not_those_importing_it_in_a_function(
    project: Callable[[dict[str, str]], Path],
) -> None:
    root = project({
        "pkg/__init__.py": "", "pkg/client.py": CLIENT.replace("from gpu_worker import process\n", ""),
        "pkg/rel.py": "from . import client\n" + NEVER, "pkg/rel_from.py": "from .client import asyncio\n" + NEVER,
        # an import inside a function runs when it is called, not on import
        "lazy.py": "def later():\n    import pkg.client\n",
        "pkg/fine.py": "from . import other\n", "pkg/other.py": "X = 1\n",
    })  # fmt: skip
    loaded = load_project(root)
    assert loaded.errors == []
    assert sorted(dict(loaded.skipped)) == ["pkg/client.py", "pkg/rel.py", "pkg/rel_from.py"]
    assert "lazy" in sys.modules


# --------------------------------------------------------------------------------------------------------------------
# Ownership


def test_an_endpoint_belongs_to_the_file_that_declares_it(project: Callable[[dict[str, str]], Path]) -> None:
    # a_pipeline.py sorts first and imports gpu_worker's endpoint: it lists only its own
    root = project({
        "a_pipeline.py": HEAD + "from gpu_worker import process\nfrom routes import api\n" + gpu_fn("pipe", "run"),
        "gpu_worker.py": HEAD + gpu_fn("gpu"),
        "routes.py": HEAD + 'api = Endpoint(name="api")\n@api.post("/c")\nasync def c(x: int):\n    return x\n',
    })  # fmt: skip
    loaded = load_project(root)
    declared = {f.rel: sorted(f.endpoints) for f in loaded.files}
    assert declared == {"a_pipeline.py": ["pipe"], "gpu_worker.py": ["gpu"], "routes.py": ["api"]}
    by_name = loaded.endpoints()
    assert list(by_name) == ["pipe", "gpu", "api"]
    assert declaring_module(by_name["gpu"][0]) == "gpu_worker"
    assert declaring_module(by_name["api"][0]) == "routes"
    assert by_name["gpu"][1].import_path == "gpu_worker:process"


def test_an_endpoint_from_outside_the_project_belongs_to_the_files_holding_it(
    project: Callable[[dict[str, str]], Path], tmp_path: Path
) -> None:
    write(tmp_path / "lib", {"shared_lib_endpoints.py": HEAD + gpu_fn("outside")})
    sys.path.insert(0, str(tmp_path / "lib"))  # restored by restore_imports
    root = project({"app.py": "from shared_lib_endpoints import process\n", "command_app.py": HEAD +
                    'h = Endpoint(name="cmd", gpu=GpuGroup.ANY, worker_command=["python", "h.py"])\n'})  # fmt: skip
    declared = {f.rel: sorted(f.endpoints) for f in load_project(root).files}
    assert declared == {"app.py": ["outside"], "command_app.py": ["cmd"]}


def test_two_files_declaring_one_name_with_other_options_cannot_be_served(
    project: Callable[[dict[str, str]], Path],
) -> None:
    root = project(
        {"a.py": HEAD + gpu_fn("dup", "a"), "b.py": HEAD + gpu_fn("dup", "b").replace("GpuGroup.ANY", "'H200'")}
    )
    with pytest.raises(ConfigError, match="b.py and a.py both declare an endpoint named 'dup'"):
        load_project(root).endpoints()
    # one name and the same options: one endpoint (a shared name)
    shared = project({"b.py": HEAD + gpu_fn("dup", "b")})
    assert list(load_project(shared).endpoints()) == ["dup"]


# --------------------------------------------------------------------------------------------------------------------
# serve's loading


def test_serve_loads_a_folder_as_a_project_and_keeps_files_and_packages(
    project: Callable[[dict[str, str]], Path], tmp_path: Path
) -> None:
    root = project({"one.py": HEAD + gpu_fn("one"), "two.py": HEAD + gpu_fn("two"), "client.py": CLIENT})
    assert list(load_target(str(root))) == ["one", "two"]
    assert list(load_target(str(root / "one.py"))) == ["one"]
    pkg = write(tmp_path / "pkgroot", {"served_pkg/__init__.py": HEAD + gpu_fn("pkg")}) / "served_pkg"
    assert list(load_target(str(pkg))) == ["pkg"]  # a folder with __init__.py stays a package


def test_serve_refuses_a_folder_that_fails_or_declares_nothing(
    project: Callable[[dict[str, str]], Path], tmp_path: Path
) -> None:
    root = project({"bad.py": "import no_such_module_here\n", "ok.py": HEAD + gpu_fn("ok")})
    with pytest.raises(ConfigError, match="bad.py: importing .* failed"):
        load_target(str(root))
    empty = write(tmp_path / "empty", {"client.py": CLIENT, ".gitignore": "ignored.py\n", "ignored.py": NEVER})
    with pytest.raises(ConfigError, match="no endpoints found in"):
        load_target(str(empty))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_serve_dir_serves_a_folder_of_two_files(serve: Callable[..., Served], tmp_path: Path) -> None:
    # Given a project folder: two endpoint files, a client script and an ignored file that must not be imported
    root = write(tmp_path / "served_project", {
        "served_one.py": HEAD + gpu_fn("served-one", body="return x + 1"),
        "sub/served_two.py": HEAD + gpu_fn("served-two", body="return x * 2"),
        "client.py": CLIENT,
        ".flashignore": "scratch/\n", "scratch/s.py": NEVER,
    })  # fmt: skip
    # When `flashpoint serve DIR` serves it
    served = serve(app=str(root))
    # Then both files' endpoints answer
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=60) as client:
        one = client.post("/v2/served-one/runsync", json={"input": {"x": 1}})
        two = client.post("/v2/served-two/runsync", json={"input": {"x": 5}})
        missing = client.post("/v2/client/runsync", json={"input": {"x": 1}})
    assert (one.status_code, one.json()["status"], one.json()["output"]) == (200, "COMPLETED", 2)
    assert (two.status_code, two.json()["status"], two.json()["output"]) == (200, "COMPLETED", 10)
    assert missing.status_code == 404
