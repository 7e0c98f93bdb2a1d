"""``flashpoint dev`` in-process: the layout of temporary projects by table (prefixes, one or several callables,
classes, route endpoints, shared names, commands, imports, skipped folders, collisions), what a reload changes, and
the dev app over a door plane whose workers the test plays (``/``, ``/ping``, ``/docs``, runsync's answers and
refusals, routes through the real route proxy to a stand-in worker on loopback, reloads keeping queued jobs).
A real ``flashpoint dev`` process: tests/e2e/test_dev.py."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from typer.testing import CliRunner

from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.runpod import Intake
from flashpoint.cli import app as cli_app
from flashpoint.config import Settings
from flashpoint.dev.app import EMPTY_INPUT, DevApp
from flashpoint.dev.docs import docs_page
from flashpoint.dev.layout import Changes, Layout, build_layout, changes
from flashpoint.dev.server import DevServer, DevSession, watched
from flashpoint.errors import ConfigError
from flashpoint.hosting.plane import bind_port
from flashpoint.hosting.project import is_project_path, load_project, project_files
from flashpoint.jobs import JobStatus, Reason
from flashpoint.spec import WorkerTarget
from flashpoint.wire.protocol import error_record
from tests.apps import route_stub_worker
from tests.conftest import eventually
from tests.scheduler.door import BASE_URL, Door, open_door, until

pytestmark = pytest.mark.timeout(60)

HEAD = "from flashpoint import Endpoint, GpuGroup\n"
JSON = "application/json"


def gpu_fn(endpoint: str, fn: str = "process", params: str = "x: int", body: str = "return x") -> str:
    return f'\n@Endpoint(name="{endpoint}", gpu=GpuGroup.ANY)\nasync def {fn}({params}):\n    {body}\n'


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


# --------------------------------------------------------------------------------------------------------------------
# The layout, by table

MODEL = """
@Endpoint(name="model", gpu=GpuGroup.ANY)
class Model:
    def predict(self, text: str) -> str:
        \"\"\"Predict the next word.\"\"\"
        return text

    async def info(self) -> dict:
        return {}

    def _private(self) -> None:
        pass
"""
ROUTES = """
api = Endpoint(name="lb-api", cpu="cpu3c-1-2")

@api.post("/compute")
async def compute(numbers: list) -> dict:
    return {"sum": sum(numbers)}

@api.get("/items/{item_id}")
async def item(item_id: str, q: int = 1) -> dict:
    return {"id": item_id}
"""
#: a file that must never be imported (it lies where dev does not look)
NEVER = 'raise SystemExit("flashpoint dev imported a file it must skip")\n' + gpu_fn("never")

LAYOUTS: list[tuple[str, dict[str, str], list[tuple[str, str, str, str]]]] = [
    ("one function", {"gpu_worker.py": HEAD + gpu_fn("gpu_worker")},
     [("POST", "/gpu_worker/runsync", "process", "gpu_worker")]),
    ("several functions: each by its name", {"w.py": HEAD + gpu_fn("wa", "a") + gpu_fn("wb", "b")},
     [("POST", "/w/a/runsync", "a", "wa"), ("POST", "/w/b/runsync", "b", "wb")]),
    ("a class: its public methods", {"m.py": HEAD + MODEL},
     [("POST", "/m/predict/runsync", "predict", "model"), ("POST", "/m/info/runsync", "info", "model")]),
    ("a class with one method is one callable",
     {"one.py": HEAD + '@Endpoint(name="one")\nclass One:\n    def go(self, x: int) -> int:\n        return x\n'},
     [("POST", "/one/runsync", "go", "one")]),
    ("a function and a class count together", {"f.py": HEAD + gpu_fn("fa", "a") + MODEL},
     [("POST", "/f/a/runsync", "a", "fa"), ("POST", "/f/predict/runsync", "predict", "model"),
      ("POST", "/f/info/runsync", "info", "model")]),
    ("a nested file's prefix is its path",
     {"01_getting_started/03_mixed_workers/cpu_worker.py":
      HEAD + '@Endpoint(name="cpu", cpu="cpu3c-1-2")\ndef work(x: int) -> int:\n    return x\n'},
     [("POST", "/01_getting_started/03_mixed_workers/cpu_worker/runsync", "work", "cpu")]),
    ("routes under the file's prefix, after its queue callables", {"lb.py": HEAD + ROUTES + gpu_fn("lb-q", "q")},
     [("POST", "/lb/runsync", "q", "lb-q"), ("POST", "/lb/compute", "compute", "lb-api"),
      ("GET", "/lb/items/{item_id}", "item", "lb-api")]),
    ("a shared name: each function by its name", {"s.py": HEAD + gpu_fn("twins", "left") + gpu_fn("twins", "right")},
     [("POST", "/s/left/runsync", "left", "twins"), ("POST", "/s/right/runsync", "right", "twins")]),
    ("one name and the same options in two files: one endpoint, each function under its own file",
     {"a.py": HEAD + gpu_fn("dup", "a"), "b.py": HEAD + gpu_fn("dup", "b")},
     [("POST", "/a/runsync", "a", "dup"), ("POST", "/b/runsync", "b", "dup")]),
    ("a worker command, by its endpoint's name",
     {"c.py": HEAD + 'h = Endpoint(name="cmd", gpu=GpuGroup.ANY, worker_command=["python", "handler.py"])\n'},
     [("POST", "/c/runsync", "cmd", "cmd")]),
    ("an endpoint imported by another file is listed under its own file only",
     {"gpu_worker.py": HEAD + gpu_fn("gpu_worker"),
      "pipeline.py": HEAD + "from gpu_worker import process\n" + gpu_fn("pipe", "run")},
     [("POST", "/gpu_worker/runsync", "process", "gpu_worker"), ("POST", "/pipeline/runsync", "run", "pipe")]),
    ("an unmodified Flash file (runpod_flash)",
     {"flash_worker.py": "from runpod_flash import Endpoint, GpuGroup\n" + gpu_fn("flash-worker")},
     [("POST", "/flash_worker/runsync", "process", "flash-worker")]),
    ("helpers, tests, docs, hidden folders, virtual environments and builds are not served",
     {"app.py": HEAD + "import helper\n" + gpu_fn("app"), "helper.py": "X = 1\n",
      "tests/t.py": NEVER, "docs/d.py": NEVER, ".hidden/h.py": NEVER, "venv/v.py": NEVER, "myenv/pyvenv.cfg": "",
      "myenv/lib/m.py": NEVER, "__pycache__/c.py": NEVER, "build/b.py": NEVER, "dist/d.py": NEVER,
      "pkg.egg-info/e.py": NEVER, "node_modules/n.py": NEVER, "test_app.py": NEVER, "app_test.py": NEVER,
      "conftest.py": NEVER, ".#app.py": NEVER,
      # a package's __init__.py runs when the package is imported, never as a file of its own
      "pkg/__init__.py": HEAD + gpu_fn("init")},
     [("POST", "/app/runsync", "process", "app")]),
]  # fmt: skip


@pytest.mark.parametrize(("files", "rows"), [case[1:] for case in LAYOUTS], ids=[case[0] for case in LAYOUTS])
def test_layout(
    project: Callable[[dict[str, str]], Path], files: dict[str, str], rows: list[tuple[str, str, str, str]]
) -> None:
    loaded = load_project(project(files))
    assert loaded.errors == []
    layout = build_layout(loaded)
    assert layout.rows() == rows
    assert layout.problems == ()
    assert set(layout.endpoints) == {row[3] for row in rows}


COLLISIONS: list[tuple[str, dict[str, str], list[tuple[str, str, str, str]], str]] = [
    ("one endpoint name with other options in two files: the second file's is left out",
     {"a.py": HEAD + gpu_fn("dup", "a"), "b.py": HEAD + gpu_fn("dup", "b").replace("GpuGroup.ANY", "'H200'")},
     [("POST", "/a/runsync", "a", "dup")], "b.py: endpoint 'dup' left out: a.py declares one of that name with other"),
    ("two callables of one name in a file",
     {"f.py": HEAD + gpu_fn("p1", "predict", params="text: str", body="return text") + MODEL},
     [("POST", "/f/predict/runsync", "predict", "p1"), ("POST", "/f/info/runsync", "info", "model")],
     "f.py: predict of endpoint 'model' left out"),
    ("a route on a queue callable's path",
     {"q.py": HEAD + gpu_fn("q") + 'api = Endpoint(name="q-api")\n@api.post("/runsync")\nasync def r(x: int):\n'
      "    return x\n"},
     [("POST", "/q/runsync", "process", "q")], "q.py: r left out: POST /q/runsync is taken by q.py: process"),
    ("a prefix the server keeps (/v2)", {"v2/worker.py": HEAD + gpu_fn("v2w"), "ok.py": HEAD + gpu_fn("ok")},
     [("POST", "/ok/runsync", "process", "ok")], "v2/worker.py: left out: its URLs would start with /v2/"),
]  # fmt: skip


@pytest.mark.parametrize(("files", "rows", "problem"), [c[1:] for c in COLLISIONS], ids=[c[0] for c in COLLISIONS])
def test_collisions_leave_the_later_one_out_and_say_so(
    project: Callable[[dict[str, str]], Path], files: dict[str, str], rows: list[Any], problem: str
) -> None:
    layout = build_layout(load_project(project(files)))
    assert layout.rows() == rows
    assert any(p.startswith(problem) for p in layout.problems), layout.problems


RC2_FILE = """
import runpod
from runpod import App

app = App("webapp")


@app.api(cpu="cpu3c-2-4")
class Web:
    @runpod.init
    def load(self):
        self.prefix = "hi "

    @runpod.post("/generate")
    async def generate(self, body: dict) -> dict:
        return {"text": self.prefix + body["name"]}


@app.api(cpu="cpu3c-2-4")
def raw():
    from fastapi import FastAPI

    return FastAPI()


@app.queue(cpu="cpu3c-2-4")
def hello(name: str) -> str:
    return "hello " + name
"""


def test_a_runpod_sdk_2_app_files_queue_functions_and_api_class_routes_are_listed(
    project: Callable[[dict[str, str]], Path],
) -> None:
    # decision 0108: an App's resources are endpoints app.env.name; a class's routes are known, a factory's are not
    layout = build_layout(load_project(project({"web.py": RC2_FILE})))
    assert layout.rows() == [
        ("POST", "/web/runsync", "hello", "webapp.default.hello"),
        ("POST", "/web/generate", "generate", "webapp.default.Web"),
    ]
    (problem,) = layout.problems
    assert "'webapp.default.raw' left out" in problem and "flashpoint serve" in problem


def test_two_files_of_one_module_name_the_second_fails_to_load(project: Callable[[dict[str, str]], Path]) -> None:
    # workers import a file by its module name: two files named worker.py in different folders cannot both be served
    loaded = load_project(project({"a/worker.py": HEAD + gpu_fn("wa"), "b/worker.py": HEAD + gpu_fn("wb")}))
    ((rel, error),) = loaded.errors
    assert rel == "b/worker.py" and "worker" in error and "rename" in error
    assert build_layout(loaded).rows() == [("POST", "/a/worker/runsync", "process", "wa")]


def test_project_files_and_the_watchers_filter_agree(project: Callable[[dict[str, str]], Path]) -> None:
    root = project({"a.py": "", "sub/b.py": "", "tests/t.py": "", "env1/pyvenv.cfg": "", "env1/x.py": "", "c.txt": ""})
    assert [p.relative_to(root).as_posix() for p in project_files(root)] == ["a.py", "sub/b.py"]
    for rel, kept in [("a.py", True), ("sub/b.py", True), ("sub/gone.py", True), ("tests/t.py", False),
                      ("env1/x.py", False), ("c.txt", False), ("test_a.py", False), (".a.py", False)]:  # fmt: skip
        assert is_project_path(root, root / rel) is kept, rel
    assert not is_project_path(root, root.parent / "elsewhere.py")


def test_the_watcher_reloads_on_project_files_and_ignore_files(project: Callable[[dict[str, str]], Path]) -> None:
    root = project({".gitignore": "scratch/\n", "a.py": "", "scratch/s.py": "", "notes.txt": ""})
    for rel, reloads in [("a.py", True), ("new.py", True), ("scratch/s.py", False), ("notes.txt", False),
                         (".gitignore", True), (".flashignore", True), ("sub/.gitignore", True), ("tests/t.py", False),
                         (".env", False)]:  # fmt: skip
        assert watched(root, str(root / rel)) is reloads, rel


def test_calls_carry_what_runsync_needs(project: Callable[[dict[str, str]], Path]) -> None:
    files = {
        "f.py": HEAD + gpu_fn("twins", "left", params="x: int, y: str = 'hi'") + gpu_fn("twins", "right") + MODEL,
        "z.py": HEAD + '@Endpoint(name="z")\nasync def zero() -> int:\n    return 0\n',
    }
    calls = build_layout(load_project(project(files))).calls
    left, predict, zero = calls["/f/left/runsync"], calls["/f/predict/runsync"], calls["/z/runsync"]
    assert (left.target, left.method, left.takes_input, dict(left.example)) == ("left", None, True, {"x": 0, "y": "hi"})
    assert (predict.target, predict.method, predict.doc) == (None, "predict", "Predict the next word.")
    assert predict.job_input({"text": "a"}) == {"text": "a", "method": "predict"}
    assert calls["/f/info/runsync"].takes_input is False
    assert zero.takes_input is False


# --------------------------------------------------------------------------------------------------------------------
# What a reload changes (pure, on real loads)


def reloaded(root: Path, edit: dict[str, str | None], before: Any) -> tuple[Any, Changes]:
    for rel, text in edit.items():
        if text is None:
            (root / rel).unlink()
        else:
            (root / rel).write_text(text)
    after = load_project(root, before)
    return after, changes(before, build_layout(before), after, build_layout(after))


BASE = {
    "gpu_worker.py": HEAD + gpu_fn("gpu"),
    "uses_helper.py": HEAD + "import helper\n" + gpu_fn("user"),
    "helper.py": "X = 1\n",
    "alone.py": HEAD + gpu_fn("alone"),
    "client.py": "print('a script with no endpoint')\n",
}
RELOADS: list[tuple[str, dict[str, str | None], Changes]] = [
    ("nothing changed", {}, Changes()),
    ("a file's code", {"gpu_worker.py": HEAD + gpu_fn("gpu", body="return x + 1")}, Changes(replaced=("gpu",))),
    ("a file's options", {"alone.py": HEAD + gpu_fn("alone").replace("GpuGroup.ANY", "'H200'")},
     Changes(replaced=("alone",))),
    ("a helper replaces the endpoints of the files using it", {"helper.py": "X = 2\n"}, Changes(replaced=("user",))),
    ("a script with no endpoint replaces nothing", {"client.py": "print('other')\n"}, Changes()),
    ("a new endpoint", {"new.py": HEAD + gpu_fn("new")}, Changes(added=("new",))),
    ("a removed file", {"alone.py": None}, Changes(removed=("alone",))),
    ("a renamed endpoint", {"alone.py": HEAD + gpu_fn("alone2")}, Changes(added=("alone2",), removed=("alone",))),
    ("a file that fails keeps its endpoint unchanged", {"gpu_worker.py": HEAD + "def broken(:\n"}, Changes()),
    ("a helper that fails: its users fail too and keep theirs", {"helper.py": "import no_such_module\n"}, Changes()),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "expected"), [r[1:] for r in RELOADS], ids=[r[0] for r in RELOADS])
def test_what_a_reload_changes(
    project: Callable[[dict[str, str]], Path], edit: dict[str, str | None], expected: Changes
) -> None:
    root = project(BASE)
    _, diff = reloaded(root, edit, load_project(root))
    assert diff == expected


OWNED = {
    # sorts before the file that declares the model, and imports it (as a pipeline or a client does)
    "a_pipeline.py": HEAD + "from gpu_worker import process\n" + gpu_fn("pipe", "run"),
    "a_client.py": "import asyncio\nfrom gpu_worker import process\n"
    'if __name__ == "__main__":\n    asyncio.run(process(1))\n',
    "gpu_worker.py": HEAD + gpu_fn("gpu"),
}
OWNED_RELOADS: list[tuple[str, dict[str, str | None], Changes]] = [
    ("an importing file's edit replaces its own endpoints, not the model's",
     {"a_pipeline.py": HEAD + "from gpu_worker import process\n" + gpu_fn("pipe", "run", body="return x + 1")},
     Changes(replaced=("pipe",))),
    ("a client's edit replaces nothing", {"a_client.py": "from gpu_worker import process\nX = 2\n"}, Changes()),
    ("the model's edit replaces it and the endpoints of the files using it",
     {"gpu_worker.py": HEAD + gpu_fn("gpu", body="return x + 1")}, Changes(replaced=("pipe", "gpu"))),
    ("a client that starts running work at import is skipped and replaces nothing",
     {"a_client.py": "import asyncio\nfrom gpu_worker import process\nasyncio.run(process(1))\n"}, Changes()),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "expected"), [r[1:] for r in OWNED_RELOADS], ids=[r[0] for r in OWNED_RELOADS])
def test_an_endpoint_reloads_with_the_file_that_declares_it(
    project: Callable[[dict[str, str]], Path], edit: dict[str, str | None], expected: Changes
) -> None:
    root = project(OWNED)
    first = load_project(root)
    assert {f.rel: list(f.endpoints) for f in first.files} == {"a_client.py": [], "a_pipeline.py": ["pipe"],
                                                               "gpu_worker.py": ["gpu"]}  # fmt: skip
    assert build_layout(first).homes["gpu"] == ("gpu_worker.py",)
    _, diff = reloaded(root, edit, first)
    assert diff == expected


def test_a_file_that_fails_serves_its_last_good_version(project: Callable[[dict[str, str]], Path]) -> None:
    root = project(BASE)
    first = load_project(root)
    after, _ = reloaded(root, {"gpu_worker.py": HEAD + "def broken(:\n"}, first)
    assert [rel for rel, _ in after.errors] == ["gpu_worker.py"]
    assert build_layout(after).rows() == build_layout(first).rows()
    # fixed again: the new code is served and replaces the last good one
    fixed, diff = reloaded(root, {"gpu_worker.py": HEAD + gpu_fn("gpu", body="return x * 2")}, after)
    assert fixed.errors == [] and diff == Changes(replaced=("gpu",))


def test_a_function_renamed_in_a_shared_name_leaves_no_stale_target(project: Callable[[dict[str, str]], Path]) -> None:
    # the old handle is still held (the previous layout serves until the new one replaces it); its group drops it
    root = project({"s.py": HEAD + gpu_fn("twins", "left") + gpu_fn("twins", "right")})
    first = load_project(root)
    held = build_layout(first)
    after, diff = reloaded(root, {"s.py": HEAD + gpu_fn("twins", "left") + gpu_fn("twins", "middle")}, first)
    layout = build_layout(after)
    assert [row[2] for row in layout.rows()] == ["left", "middle"]
    assert diff == Changes(replaced=("twins",))
    assert held.endpoints  # kept alive on purpose until here
    alone, _ = reloaded(root, {"s.py": HEAD + gpu_fn("twins", "left")}, after)
    alone_layout = build_layout(alone)
    assert alone_layout.rows() == [("POST", "/s/runsync", "left", "twins")]
    assert alone_layout.targets["twins"] == WorkerTarget(import_path="s:left")


# --------------------------------------------------------------------------------------------------------------------
# The app and its session over a door plane


@dataclass
class Rig:
    root: Path
    door: Door
    app: DevApp
    session: DevSession
    client: httpx.AsyncClient
    said: list[str]

    def reload(self, edit: dict[str, str | None]) -> Changes:
        for rel, text in edit.items():
            if text is None:
                (self.root / rel).unlink()
            else:
                (self.root / rel).write_text(text)
        return self.session.apply(load_project(self.root, self.session.project))

    async def played(self, request: Awaitable[httpx.Response], endpoint: str, result: dict[str, Any]) -> Any:
        """Send ``request`` (a held runsync) and play the endpoint's worker: it takes the job and posts ``result``;
        the answer and the job as the worker got it."""
        task = asyncio.ensure_future(request)
        job = await self.take(endpoint, task)
        worker = self.door.worker(endpoint)
        self.door.plane.done(endpoint, worker.id, job["id"], result)
        return await task, job

    async def take(self, endpoint: str, task: asyncio.Future[Any]) -> dict[str, Any]:
        await until(lambda: self.door.plane.endpoints[endpoint].queued or task.done(), "the job to be queued")
        assert not task.done(), f"answered before its job was taken: {task.result().text}"
        await self.door.settle()
        worker = self.door.worker(endpoint)
        (job,) = await self.door.plane.take(endpoint, worker.id, 1, hold_s=0)
        return job


@pytest_asyncio.fixture
async def dev(tmp_path: Path, restore_imports: None) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    """``dev(files, keys=(), fleet=...)``: a project served by a DevApp over a door plane (nothing starts; the test
    plays the workers), its client in-process."""
    opened: list[tuple[Rig, Dispatch]] = []

    async def make(files: dict[str, str], *, keys: tuple[str, ...] = (), worker: str | None = None) -> Rig:
        root = write(tmp_path / "proj", files)
        door = await open_door("node-a=NVIDIA_H200:1")
        if worker is not None:
            door.backend.http_address = worker
        intake = Intake({})
        dispatch = Dispatch(create_app(door.plane, api_keys=keys, intake=intake, route_wait_s=5), door.plane)
        app = DevApp(dispatch, door.plane, intake, Layout({}, (), {}, {}), api_keys=keys, max_body_bytes=4096)
        (tmp_path / "code").mkdir(exist_ok=True)
        said: list[str] = []
        session = DevSession(root, door.plane, app, tmp_path / "code", say=said.append)
        session.apply(load_project(root))
        await door.settle()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)
        rig = Rig(root, door, app, session, client, said)
        opened.append((rig, dispatch))
        return rig

    yield make
    for rig, dispatch in opened:
        await rig.client.aclose()
        await dispatch.routes.close()
        await rig.door.plane.close()


APP = {
    "gpu_worker.py": HEAD + gpu_fn("gpu_worker", params="x: int, y: str = 'a'"),
    "m.py": HEAD + MODEL,
    "s.py": HEAD + gpu_fn("twins", "left") + gpu_fn("twins", "right"),
    "z.py": HEAD + '@Endpoint(name="zero")\nasync def zero() -> int:\n    """No arguments."""\n    return 0\n',
    "lb.py": HEAD + ROUTES,
}


SECRET_FN = (
    '\n@Endpoint(name="keyed", gpu=GpuGroup.ANY, env={"TOKEN": "{{ RUNPOD_SECRET_tok }}"})\n'
    "async def keyed(x: int):\n    return x\n"
)


async def test_an_endpoint_naming_a_secret_is_not_served_by_dev_and_the_rest_is(
    dev: Callable[..., Awaitable[Rig]],
) -> None:
    # dev keeps no secrets: the endpoint is named with its secret, the reload goes on, and the other file serves
    rig = await dev({"a.py": HEAD + gpu_fn("plain"), "b.py": HEAD + SECRET_FN})

    assert "plain" in rig.door.plane.endpoints and "keyed" not in rig.door.plane.endpoints
    (line,) = [said for said in rig.said if "keyed" in said]
    assert "not served" in line and "tok" in line and "flashpoint serve" in line

    rig.reload({"b.py": HEAD + SECRET_FN + gpu_fn("later")})  # a later reload is applied past it, too

    assert "later" in rig.door.plane.endpoints and "keyed" not in rig.door.plane.endpoints


async def test_root_ping_and_a_docs_page_that_loads_nothing(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    root, ping, docs = [await rig.client.get(path) for path in ("/", "/ping", "/docs")]
    assert root.json() == {"message": "flashpoint dev server", "docs": "/docs"}
    assert ping.json() == {"status": "healthy"}
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    page = docs.text
    for _, path, name, endpoint in rig.session.layout.rows():
        assert f"<code>{path}</code>" in page and f"<td>{name}</td>" in page and f"<td>{endpoint}</td>" in page
    assert "curl -X POST http://plane/gpu_worker/runsync" in page
    assert "curl -X GET &#x27;http://plane/lb/items/text?q=1&#x27;" in page
    # nothing is fetched: no script, no stylesheet link, no image; the only URLs are the curl examples' own
    assert not re.search(r"<script|<link|<img|src=|@import|url\(", page, re.IGNORECASE)
    assert all(url.startswith(BASE_URL + "/") for url in re.findall(r"https?://[^\s\"'<&]+", page))
    assert (await rig.client.post("/ping")).status_code == 405


async def test_a_browser_gets_the_dashboard_at_root_and_a_client_flashs_json(
    dev: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await dev(APP, keys=("k",))
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    page = await rig.client.get("/", headers=browser)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert (
        "/static/dashboard/dashboard.js" in page.text and "script-src 'self'" in page.headers["content-security-policy"]
    )
    asset = await rig.client.get("/static/dashboard/dashboard.js")
    assert asset.status_code == 200 and asset.headers["content-type"].startswith("text/javascript")
    # the page needs no key, the API it reads does
    assert (await rig.client.get("/v1/endpoints")).status_code == 401
    assert (await rig.client.get("/v1/endpoints", headers={"Authorization": "Bearer k"})).status_code == 200
    for accept in ("*/*", "application/json"):
        answer = await rig.client.get("/", headers={"Accept": accept})
        assert answer.json() == {"message": "flashpoint dev server", "docs": "/docs"}, accept


async def test_runsync_runs_the_function_with_the_inputs_arguments(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    request = rig.client.post("/gpu_worker/runsync", json={"input": {"x": 3}})
    answer, job = await rig.played(request, "gpu_worker", {"output": {"got": 3}})
    assert job["input"] == {"x": 3} and "flashpoint" not in job
    assert answer.status_code == 200
    assert answer.json() == {"id": job["id"], "status": "COMPLETED", "output": {"got": 3}}


async def test_a_method_names_itself_and_a_shared_name_its_target(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    answer, job = await rig.played(
        rig.client.post("/m/predict/runsync", json={"input": {"text": "hi"}}), "model", {"output": "hi!"}
    )
    assert job["input"] == {"text": "hi", "method": "predict"} and answer.json()["output"] == "hi!"
    answer, job = await rig.played(
        rig.client.post("/s/right/runsync", json={"input": {"x": 1}}), "twins", {"output": 2}
    )
    assert job["input"] == {"x": 1} and job["flashpoint"] == {"target": "right"} and answer.json()["output"] == 2


async def test_a_callable_without_parameters_ignores_the_body(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    answer, job = await rig.played(rig.client.post("/z/runsync"), "zero", {"output": 0})
    assert job["input"] == {} and answer.json()["output"] == 0
    answer, job = await rig.played(rig.client.post("/m/info/runsync", content=b"junk"), "model", {"output": {}})
    assert job["input"] == {"method": "info"} and answer.status_code == 200


async def test_a_failed_job_is_500_with_its_error(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    request = rig.client.post("/gpu_worker/runsync", json={"input": {"x": 1}})
    answer, job = await rig.played(request, "gpu_worker", error_record("ValueError", "x is odd", "Traceback ..."))
    assert answer.status_code == 500
    assert answer.json() == {"error": "x is odd", "id": job["id"], "status": "FAILED", "type": "ValueError"}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"input": {}}, EMPTY_INPUT),
        ({"input": None}, EMPTY_INPUT),
        ({}, 'the body has no "input"'),
        ([1], "must be a JSON object"),
        ({"input": 5}, "input must be a JSON object of process's arguments"),
        ({"input": {"x": 1, "nope": 2}}, "does not fit gpu_worker(x: int, y: str = 'a')"),
        ({"input": {"y": "b"}}, "missing a required argument: 'x'"),
    ],
)
async def test_input_that_does_not_fit_is_422_and_queues_nothing(
    dev: Callable[..., Awaitable[Rig]], body: Any, says: str
) -> None:
    rig = await dev(APP)
    answer = await rig.client.post("/gpu_worker/runsync", json=body)
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["detail"]
    assert not rig.door.plane.endpoints["gpu_worker"].queued
    junk = await rig.client.post("/gpu_worker/runsync", content=b"{not json", headers={"content-type": JSON})
    assert junk.status_code == 422


async def test_without_keys_a_body_not_declared_json_runs_nothing(dev: Callable[..., Awaitable[Rig]]) -> None:
    # a web page may post text/plain or a form without asking (CSRF): without a key, only declared JSON is read
    rig = await dev(APP)
    for kind in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"content-type": kind} if kind else {}
        answer = await rig.client.post("/gpu_worker/runsync", content=b'{"input": {"x": 1}}', headers=headers)
        assert answer.status_code == 415 and "Content-Type: application/json" in answer.json()["detail"], answer.text
    assert not rig.door.plane.endpoints["gpu_worker"].queued
    # a callable without parameters reads no body, so there is nothing to declare (as Flash's dev server)
    answer, _ = await rig.played(rig.client.post("/m/info/runsync", content=b"junk"), "model", {"output": {}})
    assert answer.status_code == 200


async def test_with_keys_a_body_of_another_type_is_read_as_json(dev: Callable[..., Awaitable[Rig]]) -> None:
    # the key is what a web page cannot send: a keyed server reads other types as it always did
    keyed = await dev(APP, keys=("k",))
    answer = await keyed.client.post(
        "/gpu_worker/runsync", content=b'{"input": {}}', headers={"content-type": "text/plain", "authorization": "k"}
    )
    assert answer.status_code == 422 and answer.json()["detail"] == EMPTY_INPUT


async def test_unknown_paths_are_404_and_other_methods_405(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    assert (await rig.client.post("/nope/runsync", json={"input": {"x": 1}})).status_code == 404
    assert (await rig.client.post("/gpu_worker/other/runsync", json={"input": {"x": 1}})).status_code == 404
    wrong = await rig.client.get("/gpu_worker/runsync")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    big = await rig.client.post("/gpu_worker/runsync", json={"input": {"x": "9" * 5000}})
    assert big.status_code == 413


async def test_with_keys_every_route_but_ping_and_root_needs_one(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP, keys=("k",))
    assert (await rig.client.get("/ping")).status_code == 200 and (await rig.client.get("/")).status_code == 200
    assert (await rig.client.get("/docs")).status_code == 401
    assert (await rig.client.post("/gpu_worker/runsync", json={"input": {"x": 1}})).status_code == 401
    keyed = {"Authorization": "Bearer k"}
    assert (await rig.client.post("/gpu_worker/runsync", json={"input": {}}, headers=keyed)).status_code == 422
    docs = await rig.client.get("/docs", headers=keyed)
    assert "-H &quot;Authorization: Bearer $FLASHPOINT_API_KEY&quot;" in docs.text


async def test_an_endpoint_that_can_never_run_here_is_503_at_once(dev: Callable[..., Awaitable[Rig]]) -> None:
    huge = HEAD + '@Endpoint(name="huge", cpu="cpu3c-8-16")\ndef work(x: int) -> int:\n    return x\n'
    rig = await dev({"huge.py": huge})
    answer = await rig.client.post("/huge/runsync", json={"input": {"x": 1}})
    assert answer.status_code == 503 and answer.json()["error"].startswith("endpoint 'huge' ")
    assert not rig.door.plane.endpoints["huge"].queued


async def test_a_caller_that_hangs_up_cancels_its_job(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    hang_up = asyncio.Event()
    messages = [{"type": "http.request", "body": b'{"input": {"x": 1}}', "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await hang_up.wait()
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", JSON.encode())]
    scope = {"type": "http", "method": "POST", "path": "/gpu_worker/runsync", "headers": headers, "query_string": b""}
    call = asyncio.ensure_future(rig.app(scope, receive, send))
    await until(lambda: rig.door.plane.endpoints["gpu_worker"].queued, "the job to be queued")
    (job_id,) = rig.door.plane.endpoints["gpu_worker"].queue
    hang_up.set()
    await asyncio.wait_for(call, 5)
    assert sent == []
    view = rig.door.plane.job(job_id).view()
    assert view.status is JobStatus.CANCELLED and view.reason is Reason.CANCELLED


async def test_a_route_path_reaches_the_proxy_as_the_endpoints_path(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev(APP)
    seen: list[dict[str, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    rig.app.inner = inner
    await rig.client.get("/lb/items/a%2Fb%20c?q=2")
    await rig.client.put("/lb/compute")  # another method on a route's path: its worker answers the 405
    await rig.client.get("/lb/other")  # no route of the file matches: its worker answers (404), as under /lb-api/
    await rig.client.get("/gpu_worker/other")  # a file without routes: the server's app answers
    assert [(s["path"], s["raw_path"], s["query_string"]) for s in seen] == [
        ("/lb-api/items/a/b c", b"/lb-api/items/a%2Fb%20c", b"q=2"),
        ("/lb-api/compute", b"/lb-api/compute", b""),
        ("/lb-api/other", b"/lb-api/other", b""),
        ("/gpu_worker/other", b"/gpu_worker/other", b""),
    ]


@pytest_asyncio.fixture
async def stand_in() -> AsyncIterator[str]:
    """The stand-in route worker (tests/apps/route_stub_worker.py), served by uvicorn on 127.0.0.1 in this loop."""
    route_stub_worker.READY.set()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(route_stub_worker.app, log_level="critical", lifespan="off", timeout_graceful_shutdown=0.1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done(), 10, "uvicorn to start")
        assert not task.done()
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_routes_go_through_the_route_proxy_to_a_worker(dev: Callable[..., Awaitable[Rig]], stand_in: str) -> None:
    routes = HEAD + (
        'api = Endpoint(name="lb-api", cpu="cpu3c-1-2", workers=(1, 1))\n'
        '@api.post("/items/{item_id}")\nasync def item(item_id: str) -> dict:\n    return {}\n'
        '@api.get("/echo")\nasync def echo() -> dict:\n    return {}\n'
    )
    rig = await dev({"lb_worker.py": routes}, worker=stand_in)
    await rig.door.ready(rig.door.worker("lb-api"))
    answer = await rig.client.post("/lb_worker/items/42?x=1", json={"a": 1})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert (seen["method"], seen["path"], seen["query"]) == ("POST", "/items/42", "x=1")
    assert (await rig.client.get("/lb_worker/echo")).json()["path"] == "/echo"


# --------------------------------------------------------------------------------------------------------------------
# Reloads on the plane


@pytest.mark.slow
async def test_a_route_worker_retires_once_its_requests_in_flight_are_answered(
    dev: Callable[..., Awaitable[Rig]], stand_in: str
) -> None:
    routes = HEAD + (
        'api = Endpoint(name="lb-api", cpu="cpu3c-1-2", workers=(1, 1))\n'
        '@api.get("/slow")\nasync def slow(seconds: float) -> dict:\n    return {}\n'
    )
    rig = await dev({"lb_worker.py": routes}, worker=stand_in)
    old = rig.door.worker("lb-api")
    await rig.door.ready(old)
    request = asyncio.ensure_future(rig.client.get("/lb_worker/slow", params={"seconds": 1.5}))
    await eventually(lambda: old.in_flight == 1 or request.done(), 10, "the request to reach the worker")
    diff = rig.reload({"lb_worker.py": routes + "# edited\n"})
    await rig.door.settle()
    assert diff == Changes(replaced=("lb-api",))
    assert old.retiring and old.id not in rig.door.backend.stopped  # its request is still being answered
    assert (await request).json()["slept"] == 1.5
    await eventually(lambda: old.id in rig.door.backend.stopped, 10, "the retired worker to stop")
    (new,) = rig.door.workers("lb-api")
    assert new is not old


async def test_a_reload_replaces_the_changed_endpoints_workers_and_queued_jobs_stay(
    dev: Callable[..., Awaitable[Rig]],
) -> None:
    # Given a GPU endpoint on the only GPU, running job A with job B queued behind it, and another endpoint warm
    files = {"gpu_worker.py": HEAD + gpu_fn("gpu_worker"), "cpu.py": HEAD + CPU_WARM}
    rig = await dev(files)
    door = rig.door
    cpu_worker = door.worker("cpu")
    a = door.submit("gpu_worker", {"x": 1})
    await door.settle()
    old = door.worker("gpu_worker")
    assert await door.pull(old) == [a.id]
    b = door.submit("gpu_worker", {"x": 2})
    # When its file changes
    diff = rig.reload({"gpu_worker.py": HEAD + gpu_fn("gpu_worker", body="return x * 10")})
    await door.settle()
    # Then the old worker is retiring (A runs on), B stays queued, and nothing else is replaced
    assert (
        diff == Changes(replaced=("gpu_worker",))
        and "reloaded: replaced gpu_worker (1 worker(s) retiring)" in rig.said[-1]
    )
    assert old.retiring and old.id not in door.backend.stopped and door.workers("gpu_worker") == [old]
    assert door.plane.job(b.id).status is JobStatus.IN_QUEUE
    assert not cpu_worker.retiring
    # When A ends on the old worker, that worker stops and a new one (loading the file again) takes B
    await door.finish(old, a.id, "old code")
    assert door.plane.job(a.id).output == "old code"
    assert old.id in door.backend.stopped
    (new,) = door.workers("gpu_worker")
    assert new is not old and "gpu_worker:process" in door.backend.workers[new.id].launch.argv
    assert await door.pull(new) == [b.id]


CPU_WARM = '@Endpoint(name="cpu", cpu="cpu3c-1-2", workers=(1, 1))\ndef work(x: int) -> int:\n    return x\n'


async def test_a_removed_endpoint_cancels_its_queued_jobs_and_stops_its_workers(
    dev: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await dev({"cpu.py": HEAD + CPU_WARM, "keep.py": HEAD + gpu_fn("keep")})
    door = rig.door
    worker = door.worker("cpu")
    await door.pull(worker)  # ready, idle
    queued = door.submit("cpu", {"x": 1})
    diff = rig.reload({"cpu.py": None})
    await door.settle()
    assert diff == Changes(removed=("cpu",))
    assert door.plane.job(queued.id).status is JobStatus.CANCELLED
    assert worker.id in door.backend.stopped and door.workers("cpu") == []
    assert "/cpu/runsync" not in rig.app.layout.calls
    refused = await rig.client.post("/v2/cpu/run", json={"input": {"x": 1}})
    assert refused.status_code == 400 and "removed from the project" in refused.json()["error"]
    # and it stays stopped: no warm worker starts again
    await door.step(1.0)
    assert door.workers("cpu") == []


async def test_a_file_that_fails_to_import_is_served_as_it_was(dev: Callable[..., Awaitable[Rig]]) -> None:
    rig = await dev({"gpu_worker.py": HEAD + gpu_fn("gpu_worker")})
    before = rig.app.layout
    diff = rig.reload({"gpu_worker.py": HEAD + gpu_fn("gpu_worker") + "\nraise RuntimeError('half-saved')\n"})
    assert not diff and rig.app.layout.calls == before.calls
    assert any("gpu_worker.py failed to load (its last good version is served)" in line and "half-saved" in line
               for line in rig.said)  # fmt: skip
    answer, _ = await rig.played(rig.client.post("/gpu_worker/runsync", json={"input": {"x": 1}}), "gpu_worker",
                                 {"output": 1})  # fmt: skip
    assert answer.status_code == 200


# --------------------------------------------------------------------------------------------------------------------
# The server's start


@contextlib.contextmanager
def listening(port: int = 0) -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(1)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_a_busy_port_moves_to_the_next_free_one() -> None:
    with listening() as busy:
        sock = bind_port("127.0.0.1", busy)
        try:
            assert busy < sock.getsockname()[1] < busy + 20
        finally:
            sock.close()
        with pytest.raises(ConfigError, match=f"no free port on 127.0.0.1 from {busy} to {busy}"):
            bind_port("127.0.0.1", busy, attempts=1)
    sock = bind_port("127.0.0.1", 0)
    assert sock.getsockname()[1] > 0
    sock.close()


def test_the_server_refuses_what_it_cannot_serve(project: Callable[[dict[str, str]], Path], tmp_path: Path) -> None:
    settings = Settings.load(env={})
    root = project({"a.py": HEAD + gpu_fn("a"), "b.py": "import no_such_module\n"})
    with pytest.raises(ConfigError, match="refusing to listen on 0.0.0.0 without an API key"):
        DevServer(root, settings=settings, host="0.0.0.0")
    with pytest.raises(ConfigError, match=r"failed to load:\n  b.py: importing .* No module named 'no_such_module'"):
        DevServer(root, settings=settings).load()
    (root / "b.py").unlink()
    (root / "a.py").write_text("X = 1\n")
    with pytest.raises(ConfigError, match="no endpoints found"):
        DevServer(root, settings=settings).load()
    # a project whose only endpoint file runs work at import: not imported, and the refusal says so
    (root / "a.py").write_text(HEAD + gpu_fn("a") + "import asyncio\nasyncio.run(process(1))\n")
    with pytest.raises(ConfigError, match=r"no endpoints found(.|\n)*not imported: a.py: line \d+ runs an event loop"):
        DevServer(root, settings=settings).load()
    with pytest.raises(ConfigError, match="is not a folder"):
        DevServer(tmp_path / "missing", settings=settings)
    assert DevServer(root, settings=settings, host="0.0.0.0", api_keys=("k",)).host == "0.0.0.0"


def test_the_command_is_registered() -> None:
    result = CliRunner().invoke(cli_app, ["dev", "--help"])
    assert result.exit_code == 0
    for option in ("--host", "--port", "-p", "--reload", "--no-reload"):
        assert option in result.output


def test_docs_page_escapes_what_it_shows() -> None:
    layout = Layout({}, (), {}, {}, problems=("a.py: <b>x</b> left out",))
    page = docs_page(layout, "http://h", title="<proj>")
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "&lt;proj&gt;" in page and "<b>" not in page
