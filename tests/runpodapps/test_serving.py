"""How a worker serves an rc2 resource: runpodapps/serving.py (``ApiEndpoint``, ``worker_init``) and the route worker's
side of it in flashpoint.worker.routeapp (``rc2_app``, ``serve_app``, ``Pinged``), in-process through httpx's ASGI
transport with the ASGI lifespan driven as uvicorn drives it; and, slow, one real ``flashpoint serve`` of an rc2 App
file whose ``@app.api`` class answers through the server's route URL."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flashpoint.errors import InvalidEndpointError
from flashpoint.hosting.discovery import load_module
from flashpoint.runpodapps import App, get, init, post
from flashpoint.runpodapps.bridge import endpoint_for
from flashpoint.runpodapps.serving import ApiEndpoint, run_hook, worker_init
from flashpoint.spec import RouteSpec, WorkerTarget
from flashpoint.wire.protocol import ROUTE_SECRET_HEADER
from flashpoint.worker.routeapp import Pinged, rc2_app, serve_app
from tests.conftest import Served

pytestmark = [pytest.mark.usefixtures("restore_imports"), pytest.mark.timeout(60)]

#: an rc2 App file as users write it: an api class with an @init and routes, an ASGI factory, a queue function
APP_FILE = """
import runpod
from runpod import App, get, init, post

app = App("{app}")


@app.api(name="inference", cpu="cpu3c-2-4")
class Inference:
    def __init__(self):
        self.model = None
        self.instances = INSTANCES
        INSTANCES.append(self)

    @init
    async def load(self):
        self.model = "weights-" + str(len(INSTANCES))

    @post("/generate")
    async def generate(self, body: dict):
        return {{"model": self.model, "body": body, "pid": __import__("os").getpid()}}

    @get("/items/{{item_id}}")
    def item(self, item_id: int, q: str = ""):
        return {{"item": item_id, "q": q, "model": self.model}}


INSTANCES = []


@app.api(name="web", cpu="cpu3c-2-4")
def web():
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    @asynccontextmanager
    async def lifespan(server):
        server.state.started = True
        yield

    server = FastAPI(lifespan=lifespan)
    server.state.started = False

    @server.get("/hello/{{who}}")
    def hello(who: str):
        return {{"hello": who, "started": server.state.started}}

    return server


@app.queue(name="echo", cpu="cpu3c-2-4")
def echo(x):
    return x
"""


def write_app(folder: Path, module: str, app: str = "svc") -> Path:
    path = folder / f"{module}.py"
    path.write_text(textwrap.dedent(APP_FILE.format(app=app)))
    return path


@pytest.fixture
def app_module(tmp_path: Path) -> Any:
    """The rc2 App file, imported as discovery imports it (``runpod`` is flashpoint's while it loads)."""
    return load_module(str(write_app(tmp_path, "rc2_serving_app")))


@asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """The app's ASGI lifespan, started and (on exit) shut down, as uvicorn's ``lifespan="on"`` drives it."""
    to_app: asyncio.Queue[Message] = asyncio.Queue()
    from_app: asyncio.Queue[Message] = asyncio.Queue()
    scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    running = asyncio.create_task(app(scope, to_app.get, from_app.put))  # type: ignore[arg-type]
    await to_app.put({"type": "lifespan.startup"})
    assert (await from_app.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        assert (await from_app.get())["type"] == "lifespan.shutdown.complete"
        await asyncio.wait_for(running, 5)


def client(app: ASGIApp, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker", headers=headers)


# --------------------------------------------------------------------------------------------------------------------
# ApiEndpoint: what discovery registers for an @app.api resource


def test_an_api_endpoint_is_loaded_by_its_module_attribute(app_module: Any) -> None:
    served = endpoint_for(app_module.Inference)

    assert isinstance(served, ApiEndpoint)
    assert served.rc2_handle is app_module.Inference
    assert served.worker_target() == WorkerTarget(import_path="rc2_serving_app:Inference")
    assert endpoint_for(app_module.web).worker_target() == WorkerTarget(import_path="rc2_serving_app:web")
    assert repr(served) == "<Endpoint 'svc.default.inference' api Inference gpu=cpu=cpu3c-2-4>"


def test_an_api_endpoints_routes_are_the_classs_marked_methods(app_module: Any) -> None:
    spec = endpoint_for(app_module.Inference).spec

    assert spec.kind == "routes" and spec.serves_routes
    # rc2 collects the marked methods in name order (inspect.getmembers)
    assert spec.routes == (RouteSpec("POST", "/generate", "generate"), RouteSpec("GET", "/items/{item_id}", "item"))
    assert endpoint_for(app_module.web).spec.routes == ()  # a factory's app has its own routes


def test_an_api_class_declared_in_a_function_cannot_be_loaded_by_a_worker() -> None:
    app = App("local-app")

    @app.api(name="inner", cpu="cpu3c-2-4")
    class Inner:
        @get("/x")
        def x(self) -> int:
            return 1

    served = endpoint_for(Inner)
    with pytest.raises(InvalidEndpointError, match="declare its class or function at the top level of a module"):
        served.worker_target()


def test_an_api_handle_kept_only_under_another_modules_name_is_not_found(app_module: Any) -> None:
    # the handle's module no longer holds it (the attribute was rebound): a worker's import would not find it
    handle = app_module.Inference
    app_module.Inference = None
    try:
        with pytest.raises(InvalidEndpointError, match="inference"):
            endpoint_for(handle).worker_target()
    finally:
        app_module.Inference = handle


# --------------------------------------------------------------------------------------------------------------------
# worker_init and run_hook: @fn.init in a queue or task worker


def test_worker_init_runs_a_sync_init_hook() -> None:
    app = App("hooks")
    calls: list[str] = []

    @app.queue(name="q", cpu="cpu3c-2-4")
    def q(x: int) -> int:
        return x

    @q.init
    def warm() -> None:
        calls.append("sync")

    worker_init(q)
    assert calls == ["sync"]


def test_worker_init_runs_an_async_init_hook_to_its_end() -> None:
    app = App("hooks")
    calls: list[str] = []

    @app.task(name="t", cpu="cpu3c-2-4")
    def t(x: int) -> int:
        return x

    @t.init
    async def warm() -> None:
        await asyncio.sleep(0)  # a real await: the hook is driven by an event loop, past its first suspension
        calls.append("async")

    worker_init(t)
    assert calls == ["async"]


def test_worker_init_without_a_hook_does_nothing() -> None:
    app = App("hooks")

    @app.queue(name="plain", cpu="cpu3c-2-4")
    def plain() -> None:
        return None

    worker_init(plain)  # no hook, no error


def test_run_hook_passes_its_arguments() -> None:
    seen: list[int] = []
    run_hook(seen.append, 7)
    assert seen == [7]


# --------------------------------------------------------------------------------------------------------------------
# rc2_app: the app a route worker serves for an @app.api handle


def test_rc2_app_serves_one_instance_of_the_class_after_its_init(app_module: Any) -> None:
    # as the route worker does: the app is built before its event loop runs (an async @init gets a loop of its own)
    served = rc2_app(app_module.Inference)

    assert len(app_module.INSTANCES) == 1  # built once, when the worker builds its app
    instance = app_module.INSTANCES[0]
    assert instance.model == "weights-1"  # its async @init ran (awaited) before any request

    async def calls() -> list[httpx.Response]:
        async with client(served) as http:
            return [
                await http.post("/generate", json={"prompt": "hi", "n": 2}),
                await http.get("/items/42", params={"q": "x"}),
                await http.get("/items/not-a-number"),
                await http.get("/nowhere"),
            ]

    generated, item, bad, missing = asyncio.run(calls())

    assert generated.status_code == 200
    assert generated.json() == {"model": "weights-1", "body": {"prompt": "hi", "n": 2}, "pid": os.getpid()}
    assert item.json() == {"item": 42, "q": "x", "model": "weights-1"}  # path and query parameters, FastAPI's way
    assert bad.status_code == 422
    assert missing.status_code == 404
    assert len(app_module.INSTANCES) == 1  # every request went to the one instance


async def test_rc2_app_serves_a_factorys_app_as_it_is(app_module: Any) -> None:
    served = rc2_app(app_module.web)

    async with lifespan(served), client(served) as http:
        answer = await http.get("/hello/ada")

    assert answer.json() == {"hello": "ada", "started": True}


def test_rc2_app_refuses_a_factory_that_returns_no_app() -> None:
    app = App("bad-factory")

    @app.api(name="nothing", cpu="cpu3c-2-4")
    def nothing() -> Any:
        return 42

    with pytest.raises(TypeError, match="@app.api function nothing returned int, not an ASGI app"):
        rc2_app(nothing)


class Opaque:
    """A type FastAPI cannot read from a request."""


def test_rc2_app_names_a_route_that_cannot_be_served() -> None:
    app = App("bad-route")

    @app.api(name="unserved", cpu="cpu3c-2-4")
    class Unserved:
        @post("/x")
        def x(self, body: Opaque) -> int:  # no request can carry an arbitrary object
            return 1

    with pytest.raises(TypeError, match=r"route POST /x \(Unserved.x\) cannot be served"):
        rc2_app(Unserved)


def test_rc2_app_runs_a_sync_init_method() -> None:
    app = App("sync-init")

    @app.api(name="s", cpu="cpu3c-2-4")
    class S:
        ready = False

        @init
        def setup(self) -> None:
            self.ready = True

        @get("/ready")
        def is_ready(self) -> bool:
            return self.ready

    async def call() -> Any:
        async with client(rc2_app(S)) as http:
            return (await http.get("/ready")).json()

    assert asyncio.run(call()) is True


# --------------------------------------------------------------------------------------------------------------------
# serve_app and Pinged: /ping, lifespan, the route secret around an app of the user's own


def factory_app() -> tuple[Any, list[str]]:
    """A FastAPI app with a lifespan of its own, and the events it saw."""
    from fastapi import FastAPI

    events: list[str] = []

    @asynccontextmanager
    async def own_lifespan(app: Any) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    user = FastAPI(lifespan=own_lifespan)

    @user.get("/events")
    def read() -> list[str]:
        return events

    return user, events


async def test_ping_is_204_before_the_apps_startup_and_200_after() -> None:
    user, events = factory_app()
    served = serve_app(user)

    async with client(served) as http:
        before = await http.get("/ping")
        async with lifespan(served):
            during = await http.get("/ping")
            seen = await http.get("/events")
        after = await http.get("/ping")

    assert (before.status_code, before.content) == (204, b"")
    assert during.status_code == 200 and during.json() == {"status": "healthy"}
    assert seen.json() == ["startup"]  # the user's own lifespan ran: serve_app passed it on
    assert events == ["startup", "shutdown"]
    assert after.status_code == 204  # shut down: not ready any more


async def test_serve_app_refuses_requests_without_the_route_secret() -> None:
    user, _ = factory_app()
    served = serve_app(user, route_secret="s3cret")

    async with lifespan(served):
        async with client(served) as anonymous:
            refused_ping = await anonymous.get("/ping")
            refused = await anonymous.get("/events")
        async with client(served, **{ROUTE_SECRET_HEADER: "wrong"}) as wrong:
            wrong_secret = await wrong.get("/events")
        async with client(served, **{ROUTE_SECRET_HEADER: "s3cret"}) as proxy:
            ping = await proxy.get("/ping")
            allowed = await proxy.get("/events")

    assert refused_ping.status_code == refused.status_code == wrong_secret.status_code == 403
    assert refused.json()["code"] == "forbidden"
    assert ping.status_code == 200 and allowed.json() == ["startup"]


async def test_serve_app_answers_a_raise_of_a_bare_app_with_a_json_500() -> None:
    async def raising(scope: Scope, receive: Receive, send: Send) -> None:
        raise ValueError("kaput")

    async with client(serve_app(raising)) as http:
        answer = await http.get("/boom")

    assert answer.status_code == 500
    assert answer.json() == {
        "error": "ValueError: kaput",
        "code": "handler_error",
        "type": "ValueError",
        "message": "kaput",
    }


async def test_a_fastapi_apps_own_error_answer_is_kept() -> None:
    from fastapi import FastAPI

    user = FastAPI()

    @user.get("/boom")
    def boom() -> None:
        raise ValueError("kaput")

    async with client(serve_app(user)) as http:
        answer = await http.get("/boom")

    # FastAPI answers its own 500 before the exception leaves it; flashpoint sends nothing over it
    assert (answer.status_code, answer.text) == (500, "Internal Server Error")


async def bare_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI callable with no lifespan support: it fails on anything but HTTP."""
    assert scope["type"] == "http", "lifespan is not supported"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"bare " + scope["path"].encode()})


async def test_an_app_without_lifespan_support_is_started_for_it() -> None:
    served = serve_app(bare_asgi)

    async with client(served) as http:
        before = await http.get("/ping")
        async with lifespan(served):  # the protocol is completed for the app: startup, then shutdown
            during = await http.get("/ping")
            answer = await http.get("/anything")
        after = await http.get("/ping")

    assert before.status_code == 204
    assert during.status_code == 200
    assert answer.text == "bare /anything"
    assert after.status_code == 204


async def test_pinged_reraises_a_failure_after_the_app_started() -> None:
    class FailsAfterStartup:
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await receive()
            await send({"type": "lifespan.startup.complete"})
            raise RuntimeError("broke after startup")

    pinged = Pinged(FailsAfterStartup())  # type: ignore[arg-type]
    to_app: asyncio.Queue[Message] = asyncio.Queue()
    sent: list[Message] = []

    async def record(message: Message) -> None:
        sent.append(message)

    await to_app.put({"type": "lifespan.startup"})
    with pytest.raises(RuntimeError, match="broke after startup"):
        await pinged({"type": "lifespan", "asgi": {"version": "3.0"}}, to_app.get, record)
    assert sent == [{"type": "lifespan.startup.complete"}]


# --------------------------------------------------------------------------------------------------------------------
# A real route worker behind `flashpoint serve`


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_serve_answers_an_api_classs_route_through_the_servers_route_url(
    tmp_path: Path, serve: Callable[..., Served]
) -> None:
    app_file = write_app(tmp_path, "rc2_served_app", app="shop")

    served = serve(app=str(app_file))  # an absolute path: the fixture's ROOT / app is the file itself
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=120) as http:
        generated = http.post("/shop.default.inference/generate", json={"prompt": "hi"})
        item = http.get("/shop.default.inference/items/7", params={"q": "y"})
        hello = http.get("/shop.default.web/hello/ada")

    assert generated.status_code == 200, generated.text
    answer = generated.json()
    # the class's route, its @init run in a worker process of its own before the worker answered
    assert answer["model"] == "weights-1" and answer["body"] == {"prompt": "hi"}
    assert answer["pid"] not in (os.getpid(), served.proc.pid)
    assert item.json() == {"item": 7, "q": "y", "model": "weights-1"}
    assert hello.json() == {"hello": "ada", "started": True}  # the factory's app, its startup run


def test_importing_serving_loads_no_fastapi() -> None:
    # serving.py is SDK-side: importing it never loads FastAPI (the route worker's routeapp does)
    import subprocess

    code = "import sys, flashpoint.runpodapps.serving; print('fastapi' in sys.modules)"
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "False"
