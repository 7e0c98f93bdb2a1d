"""Handles (rc2's ``runpod/apps/handles.py``): the verbs of a queue or task function and of an api class, over an
in-memory target (``memtarget.LocalApp``), the worker's in-process path, and the decoration checks."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from flashpoint.runpodapps import App, DataCenter, Job, RemoteExecutionError, RouteSpec, get, init, post
from flashpoint.runpodapps.discovery_state import DiscoveryInvocationError
from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.markers import INIT_ATTR
from tests.runpodapps.memtarget import LocalApp


@pytest.fixture
def app() -> LocalApp:
    return LocalApp("demo")


# --- a function's handle -------------------------------------------------------------------------------------------


def test_calling_the_handle_is_a_type_error(app: LocalApp) -> None:
    @app.queue()
    def transcribe(url: str) -> str:
        return url

    @app.task(name="batch")
    def train() -> None: ...

    with pytest.raises(TypeError) as raised:
        transcribe("u")
    assert str(raised.value) == (
        "'transcribe' is a runpod queue handle. use .remote(...) to execute remotely, .local(...) to run here, "
        "or .spawn(...) to fire and forget."
    )
    with pytest.raises(TypeError, match="^'train' is a runpod task handle"):
        train()


def test_the_handle_looks_like_its_function(app: LocalApp) -> None:
    def transcribe(url: str) -> str:
        """Transcribe."""
        return url

    handle = app.queue(name="stt")(transcribe)
    assert (handle.__name__, handle.__doc__, handle.__wrapped__) == ("transcribe", "Transcribe.", transcribe)
    assert repr(handle) == "<FunctionHandle queue:stt app='demo'>"
    assert app.resources == {"stt": handle}


def test_local_sync_and_async(app: LocalApp) -> None:
    @app.queue()
    def add(a: int, b: int) -> int:
        return a + b

    @app.queue()
    async def mul(a: int, b: int) -> int:
        return a * b

    assert add.local(2, b=3) == 5
    pending = mul.local(2, 3)
    assert inspect.iscoroutine(pending)
    assert asyncio.run(pending) == 6


def test_remote_sync_maps_arguments(app: LocalApp) -> None:
    @app.queue()
    def add(a: int, b: int = 1) -> int:
        return a + b

    assert add.remote(2, b=5) == 7
    assert app.targets["add"].payloads == [{"input": {"a": 2, "b": 5}}]
    assert app.targets["add"].timeouts == [300.0]  # the target's own default: the handle passes none


async def test_remote_aio_and_no_arguments(app: LocalApp) -> None:
    @app.queue()
    async def ping() -> str:
        return "pong"

    assert await ping.remote.aio() == "pong"
    assert app.targets["ping"].payloads == [{"input": {"__empty": True}}]


def test_remote_failure(app: LocalApp) -> None:
    @app.queue()
    def boom() -> None:
        raise RuntimeError("bad input")

    with pytest.raises(RemoteExecutionError) as raised:
        boom.remote()
    assert str(raised.value) == "remote execution failed: RuntimeError: bad input"


def test_too_many_arguments_fail_before_submitting(app: LocalApp) -> None:
    @app.queue()
    def one(a: int) -> int:
        return a

    with pytest.raises(TypeError, match=r"^one\(\) got 2 positional args, expected at most 1$"):
        one.remote(1, 2)
    assert app.targets["one"].payloads == []


def test_with_options_stacks_and_leaves_the_original(app: LocalApp) -> None:
    @app.queue()
    def work() -> str:
        return "ok"

    first = work.with_options(webhook="https://a", ttl=60)
    second = first.with_options(execution_timeout=5, low_priority=True, webhook="https://b")
    assert second is not first and first is not work
    assert work._job_options == {}
    assert first._job_options == {"webhook": "https://a", "policy": {"ttl": 60}}
    assert second._job_options == {
        "webhook": "https://b",
        "policy": {"ttl": 60, "executionTimeout": 5, "lowPriority": True},
    }
    assert second.spec is work.spec
    assert app.resources["work"] is work  # the clone is not registered again

    second.remote()
    work.remote()
    assert app.targets["work"].payloads == [
        {
            "input": {"__empty": True},
            "webhook": "https://b",
            "policy": {"ttl": 60, "executionTimeout": 5, "lowPriority": True},
        },
        {"input": {"__empty": True}},
    ]


def test_with_options_keeps_the_init_hook(app: LocalApp) -> None:
    @app.queue()
    def work() -> None: ...

    @work.init
    def load() -> None: ...

    assert work._init_fn is load and getattr(load, INIT_ATTR) is True
    assert work.with_options(ttl=1)._init_fn is load


def test_tasks_take_no_job_options(app: LocalApp) -> None:
    @app.task()
    def train() -> None: ...

    with pytest.raises(InvalidResourceError) as raised:
        train.with_options(webhook="https://a")
    assert str(raised.value) == "per-job options apply only to @app.queue functions; tasks run on a dedicated pod"


def test_with_options_is_keyword_only(app: LocalApp) -> None:
    @app.queue()
    def work() -> None: ...

    with pytest.raises(TypeError):
        work.with_options("https://a")  # type: ignore[call-arg]


def test_spawn_returns_a_job_for_queues_and_tasks(app: LocalApp) -> None:
    @app.queue()
    def square(x: int) -> int:
        return x * x

    @app.task()
    def train(epochs: int) -> str:
        return f"trained {epochs}"

    job = square.with_options(ttl=9).spawn(4)
    assert isinstance(job, Job)
    assert job.result() == 16
    assert app.targets["square"].payloads == [{"input": {"x": 4}, "policy": {"ttl": 9}}]
    task_job = train.spawn(epochs=2)
    assert isinstance(task_job, Job)
    assert task_job.status() == "COMPLETED" and task_job.result() == "trained 2"


def test_reconnect_to_a_job(app: LocalApp) -> None:
    @app.queue()
    def square(x: int) -> int:
        return x * x

    @app.task()
    def train() -> None: ...

    first = square.spawn(3)
    again = square.job(first.id)
    assert repr(again) == f"Job(id={first.id!r}, status='UNKNOWN')"
    assert again.result() == 9
    with pytest.raises(InvalidResourceError) as raised:
        train.job("job-1")
    assert str(raised.value) == "task jobs cannot be reconnected by id; retain the job returned by .spawn()"


def test_stream(app: LocalApp) -> None:
    @app.queue()
    def count(n: int) -> Iterator[int]:
        yield from range(n)

    @app.queue()
    async def acount(n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i

    assert list(count.stream(3)) == [0, 1, 2]
    assert list(acount.stream(n=2)) == [0, 1]


def test_stream_refuses_plain_functions_and_tasks(app: LocalApp) -> None:
    @app.queue()
    def plain() -> int:
        return 1

    @app.task()
    def gen() -> Iterator[int]:
        yield 1

    with pytest.raises(InvalidResourceError) as raised:
        list(plain.stream())
    assert str(raised.value) == "'plain' is not a generator function; use .remote(...) instead"
    with pytest.raises(InvalidResourceError) as raised:
        list(gen.stream())
    assert str(raised.value) == "tasks do not stream; use @app.queue for generator functions"


def test_every_call_validates_the_spec_again(app: LocalApp) -> None:
    @app.queue()
    def work() -> None: ...

    work.spec.datacenter = "atlantis"
    with pytest.raises(InvalidResourceError, match="^invalid datacenter: 'atlantis'$"):
        work.remote()
    work.spec.datacenter = DataCenter.EU_RO_1
    work.remote()
    assert work.spec.datacenter == ["EU-RO-1"]


async def test_the_real_resolve_validates_before_the_bridge() -> None:
    app = App("plain")

    @app.queue()
    def work() -> None: ...

    work.spec.gpu = "B300"
    with pytest.raises(InvalidResourceError, match="^unknown gpu 'B300'"):
        await work.remote.aio()


# --- inside the worker that serves the resource --------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["FLASH_RESOURCE_NAME", "RUNPOD_RESOURCE_NAME"])
def test_in_its_own_worker_remote_runs_in_process(
    app: LocalApp, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    @app.queue()
    def add(a: int, b: int) -> int:
        return a + b

    @app.queue()
    async def mul(a: int, b: int) -> int:
        return a * b

    @app.queue()
    def gen() -> Iterator[int]:
        yield from (1, 2)

    monkeypatch.setenv("RUNPOD_POD_ID", "w-1")
    monkeypatch.setenv(variable, "add")
    assert add.remote(2, 3) == 5
    monkeypatch.setenv(variable, "mul")
    assert mul.remote(2, 3) == 6
    monkeypatch.setenv(variable, "gen")
    assert gen.remote() == [1, 2]
    assert list(gen.stream()) == [1, 2]
    assert app.targets == {}  # nothing resolved


async def test_in_its_own_worker_aio_runs_in_process(app: LocalApp, monkeypatch: pytest.MonkeyPatch) -> None:
    @app.queue()
    def add(a: int, b: int) -> int:
        return a + b

    monkeypatch.setenv("RUNPOD_POD_ID", "w-1")
    monkeypatch.setenv("FLASH_RESOURCE_NAME", "add")
    assert await add.remote.aio(1, 2) == 3
    assert app.targets == {}


def test_in_another_resources_worker_remote_resolves(app: LocalApp, monkeypatch: pytest.MonkeyPatch) -> None:
    @app.queue()
    def add(a: int, b: int) -> int:
        return a + b

    monkeypatch.setenv("RUNPOD_POD_ID", "w-1")
    monkeypatch.setenv("FLASH_RESOURCE_NAME", "other")
    assert add.remote(1, 1) == 2
    assert list(app.targets) == ["add"]


def test_the_dev_pair_decides_the_current_worker(app: LocalApp, monkeypatch: pytest.MonkeyPatch) -> None:
    @app.queue()
    def add(a: int, b: int) -> int:
        return a + b

    monkeypatch.setenv("RUNPOD_DEV_APP", "demo")
    monkeypatch.setenv("RUNPOD_DEV_RESOURCE", "add")
    monkeypatch.setenv("FLASH_RESOURCE_NAME", "other")  # ignored while RUNPOD_DEV_APP is set
    assert add._is_current_worker()
    monkeypatch.setenv("RUNPOD_DEV_APP", "another-app")
    assert not add._is_current_worker()
    monkeypatch.delenv("RUNPOD_DEV_APP")
    assert not add._is_current_worker()


def test_calls_during_a_discovery_scan_raise(app: LocalApp, monkeypatch: pytest.MonkeyPatch) -> None:
    @app.queue()
    def work() -> None: ...

    @app.api()
    class Web:
        @get("/")
        def index(self) -> None: ...

    monkeypatch.setenv("RUNPOD_DISCOVERY_SCAN", "1")
    for call in (work.remote, work.spawn, lambda: list(work.stream()), lambda: Web.get("/")):
        with pytest.raises(DiscoveryInvocationError, match="was invoked at import time"):
            call()
    assert work.local() is None  # .local is not guarded


# --- an api class's handle -----------------------------------------------------------------------------------------


def test_an_api_class(app: LocalApp) -> None:
    @app.api(name="inference")
    class Inference:
        @init
        def setup(self) -> None:
            self.model = "m"

        @post("/generate")
        async def generate(self, body: dict[str, Any]) -> dict[str, Any]:
            return body

        @get("/health")
        def health(self) -> str:
            return "ok"

        def helper(self) -> None: ...

    assert Inference._cls is not None and Inference._cls.__name__ == "Inference"
    assert Inference._init_name == "setup"
    assert Inference._asgi_factory is None
    assert Inference.spec.routes == [RouteSpec("POST", "/generate", "generate"), RouteSpec("GET", "/health", "health")]
    assert Inference.spec.asgi_factory is None
    assert repr(Inference) == "<ApiHandle api:inference routes=2 app='demo'>"
    assert Inference.__name__ == "Inference"

    assert Inference.post("/generate", {"prompt": "hi"}, timeout=3) == {
        "method": "POST",
        "path": "/generate",
        "body": {"prompt": "hi"},
    }
    assert app.targets["inference"].requests == [("POST", "/generate", {"prompt": "hi"}, {})]


async def test_route_callers(app: LocalApp) -> None:
    @app.api()
    class Items:
        @get("/items")
        def items(self) -> None: ...

    for verb in ("get", "post", "put", "delete", "patch"):
        assert (await getattr(Items, verb).aio("/items"))["method"] == verb.upper()


def test_an_asgi_factory(app: LocalApp) -> None:
    def web() -> Any:
        return object()

    handle = app.api(name="web", cpu="cpu5c-2-4")(web)
    assert handle._asgi_factory is web and handle._cls is None and handle._init_name is None
    assert handle.spec.asgi_factory == web.__qualname__
    assert handle.spec.routes == []


def test_duplicate_routes(app: LocalApp) -> None:
    with pytest.raises(InvalidResourceError) as raised:

        @app.api()
        class Twice:
            @get("/x")
            def a(self) -> None: ...

            @get("/x")
            def b(self) -> None: ...

    assert str(raised.value) == "duplicate route GET /x on Twice: 'a' and 'b'"


def test_two_init_methods(app: LocalApp) -> None:
    with pytest.raises(InvalidResourceError) as raised:

        @app.api()
        class Twice:
            @init
            def a(self) -> None: ...

            @init
            def b(self) -> None: ...

            @get("/")
            def index(self) -> None: ...

    assert str(raised.value) == "multiple @init methods on Twice: 'a' and 'b'"


def test_an_api_class_without_routes(app: LocalApp) -> None:
    with pytest.raises(InvalidResourceError) as raised:

        @app.api()
        class Empty:
            def index(self) -> None: ...

    assert str(raised.value) == (
        "@app.api class Empty defines no routes; mark methods with @get/@post/@put/@delete/@patch"
    )


def test_api_on_something_not_callable(app: LocalApp) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        app.api(name="thing")(42)
    assert str(raised.value) == (
        "@app.api must decorate a class with route markers or a zero-argument function returning an asgi app"
    )
    with pytest.raises(AttributeError):  # without a name, rc2 reads the target's __name__ first
        app.api()(42)
    assert app.resources == {}
