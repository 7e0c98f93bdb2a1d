"""Runpod Flash's client shapes (issue 11, point 4): ``EndpointJob``, the HTTP-route calls of ``Endpoint(id=...)``
(``get/post/put/delete/patch``), ``webhook=``, and a ``worker_command`` endpoint's ``run``/``runsync``.

``flashpoint serve`` does not serve HTTP-route endpoints yet (the next issue fixes its layout: ``METHOD
/{endpoint}/{path}`` handed to a worker, behind the server's API key), so the route calls are tested against a small
real server on 127.0.0.1 port 0 that answers that layout. ``Endpoint(id=...)``'s queue verbs are tested against the
fake servicer in ``test_client.py``; the ``worker_command`` ones against real Runpod handlers (slow).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from flashpoint import Endpoint, EndpointClient, EndpointJob, GpuType
from flashpoint.errors import BackendError, BadInputError, ConfigError, Error, NotFoundError
from flashpoint.jobs import JobError, JobStatus, JobView, Reason
from flashpoint.sdk import client as client_module, default_connection
from flashpoint.sdk.client import HTTPConnection
from flashpoint.sdk.connection import Connection
from flashpoint.sdk.endpointjob import with_webhook
from tests.conftest import eventually_async

pytestmark = pytest.mark.timeout(60)

KEY = "route-key"
HANDLERS = Path(__file__).resolve().parents[1] / "apps" / "handlers"


# --------------------------------------------------------------------------------------------------------------------
# A server answering the HTTP-route layout: METHOD /{endpoint}/{path}, behind an API key


#: webhook deliveries received (``POST /hooks/...``, no key needed), in order
HOOKS: list[Any] = []


async def route(request: Request) -> Response:
    if request.path_params["endpoint"] == "hooks":
        HOOKS.append(await request.json())
        return JSONResponse({})
    if request.headers.get("authorization") != f"Bearer {KEY}":
        return JSONResponse({"error": "unauthorized", "code": "unauthorized"}, status_code=401)
    endpoint, path = request.path_params["endpoint"], "/" + request.path_params["path"]
    raw = await request.body()
    if path == "/echo":
        return JSONResponse(
            {
                "endpoint": endpoint,
                "method": request.method,
                "query": [list(pair) for pair in request.query_params.multi_items()],
                "body": raw.decode() or None,
                "type": request.headers.get("content-type"),
            }
        )
    if path.startswith("/status/"):
        return PlainTextResponse(f"answered {path}", status_code=int(path.rsplit("/", 1)[1]))
    if path == "/text":
        return PlainTextResponse("not json")
    if path == "/empty":
        return Response(status_code=204)
    if path == "/big":  # declares its length
        return Response(b"[" + b"1," * 600 + b"1]", media_type="application/json")
    if path == "/big-chunked":  # no length: only reading tells

        async def chunks() -> AsyncIterator[bytes]:
            yield b"["
            for _ in range(60):
                yield b"1," * 10
            yield b"1]"

        return StreamingResponse(chunks(), media_type="application/json")
    if path == "/trickle":  # every read is quick, the whole answer is not

        async def slowly() -> AsyncIterator[bytes]:
            for _ in range(40):
                await asyncio.sleep(0.05)  # the server's pace, not a synchronisation
                yield b" "
            yield b"{}"

        return StreamingResponse(slowly(), media_type="application/json")
    if path == "/hang":  # answers nothing until the client gives up
        while not await request.is_disconnected():
            await asyncio.sleep(0.05)  # the server's pace, not a synchronisation
        return JSONResponse({})
    return JSONResponse({"detail": "Not Found"}, status_code=404)


@pytest.fixture(scope="module")
def route_server() -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app = Starlette(routes=[Route("/{endpoint}/{path:path}", route, methods=["GET", "POST", "PUT", "DELETE", "PATCH"])])
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the route server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(20)
    sock.close()


@pytest.fixture
def served(route_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[HTTPConnection]:
    """Client mode: FLASHPOINT_URL set (mock the OS) and an HTTPConnection with the server's key in use."""
    monkeypatch.setenv("FLASHPOINT_URL", route_server)
    connection = HTTPConnection(route_server, KEY)
    default_connection.use(connection)
    yield connection
    default_connection.use(None)


# --------------------------------------------------------------------------------------------------------------------
# get/post/put/delete/patch


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
async def test_body_methods_send_data_as_json(served: HTTPConnection, method: str) -> None:
    answer = await getattr(Endpoint(id="my-api"), method)("/echo", {"numbers": [1, 2], "text": "é"})

    assert answer == {
        "endpoint": "my-api",
        "method": method.upper(),
        "query": [],
        "body": '{"numbers": [1, 2], "text": "é"}',
        "type": "application/json",
    }


async def test_a_body_method_without_data_sends_no_body(served: HTTPConnection) -> None:
    answer = await Endpoint(id="my-api").post("/echo")

    assert (answer["method"], answer["body"], answer["type"]) == ("POST", None, None)


async def test_get_sends_data_as_query_parameters(served: HTTPConnection) -> None:
    answer = await Endpoint(id="my-api").get("/echo", {"limit": 10, "tags": ["a", "b"], "on": True, "q": "x y"})

    assert answer["method"] == "GET" and answer["body"] is None
    assert answer["query"] == [["limit", "10"], ["tags", "a"], ["tags", "b"], ["on", "true"], ["q", "x y"]]


async def test_get_keeps_a_query_written_in_the_path(served: HTTPConnection) -> None:
    answer = await Endpoint(id="my-api").get("/echo?page=2")

    assert answer["query"] == [["page", "2"]]


def test_get_data_must_be_a_mapping_of_scalars() -> None:
    ep = Endpoint(id="my-api")

    # at the call, before any I/O
    with pytest.raises(TypeError, match="GET sends data as query parameters: pass a dict"):
        ep.get("/echo", [1, 2])
    with pytest.raises(TypeError, match="'nested' has dict"):
        ep.get("/echo", {"nested": {"a": 1}})


async def test_an_empty_answer_is_none(served: HTTPConnection) -> None:
    assert await Endpoint(id="my-api").delete("/empty") is None


@pytest.mark.parametrize(
    ("path", "kind", "phrases"),
    [
        ("/status/404", NotFoundError, ["POST", "/my-api/status/404", "HTTP 404", "answered /status/404"]),
        ("/nowhere", NotFoundError, ["HTTP 404", "Not Found", "does it have that route?"]),
        ("/status/500", Error, ["HTTP 500", "answered /status/500"]),
        ("/status/422", Error, ["HTTP 422"]),
        ("/text", Error, ["not JSON", "'not json'"]),
    ],
)
async def test_errors_name_the_status_and_the_body(
    served: HTTPConnection, path: str, kind: type[Error], phrases: list[str]
) -> None:
    with pytest.raises(kind) as info:
        await Endpoint(id="my-api").post(path, {"x": 1})

    for phrase in phrases:
        assert phrase in str(info.value), (phrase, str(info.value))


async def test_a_refused_key_is_a_config_error(route_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHPOINT_URL", route_server)  # mock the OS
    default_connection.use(HTTPConnection(route_server, "wrong"))
    try:
        with pytest.raises(ConfigError, match="HTTP 401: the server refused the API key; set FLASHPOINT_API_KEY"):
            await Endpoint(id="my-api").get("/echo")
    finally:
        default_connection.use(None)


@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
async def test_answers_are_read_up_to_a_bound(
    served: HTTPConnection, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setattr(client_module, "MAX_ROUTE_RESPONSE_BYTES", 1000)  # the bound, small enough for a test

    with pytest.raises(Error, match="more than the 1000"):
        await Endpoint(id="my-api").get(path)
    monkeypatch.setattr(client_module, "MAX_ROUTE_RESPONSE_BYTES", 10_000)
    assert len(await Endpoint(id="my-api").get(path)) == 601


@pytest.mark.parametrize("path", ["/hang", "/trickle"])
async def test_the_whole_exchange_is_bounded_by_timeout(served: HTTPConnection, path: str) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()

    with pytest.raises(TimeoutError, match=f"GET {served.url}/my-api{path} did not answer within 0.5s"):
        await Endpoint(id="my-api").get(path, timeout=0.5)
    assert loop.time() - began < 1.5


async def test_an_unreachable_server_is_a_backend_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens there once closed
    monkeypatch.setenv("FLASHPOINT_URL", url)  # mock the OS
    default_connection.use(HTTPConnection(url, KEY))
    try:
        with pytest.raises(BackendError, match="cannot reach the flashpoint server"):
            await Endpoint(id="my-api").post("/echo", {})
    finally:
        default_connection.use(None)


@pytest.mark.parametrize("path", ["compute", "", "/a/../v2/other/run", "/./x", "/x/..?y=1"])
def test_a_route_path_starts_with_a_slash_and_stays_under_the_endpoint(path: str) -> None:
    with pytest.raises(ValueError, match="route path"):
        Endpoint(id="my-api").post(path, {})


@pytest.mark.parametrize("timeout", [0, -1, True, "5"])
def test_a_route_timeout_is_a_positive_number(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        Endpoint(id="my-api").get("/echo", timeout=timeout)


def test_a_client_is_no_route_decorator() -> None:
    ep = Endpoint(id="my-api")

    with pytest.raises(TypeError, match=r'client, not a route decorator: @ep.post\("/compute"\)'):

        @ep.post("/compute")
        async def compute(numbers: list[float]) -> float:
            return sum(numbers)

    gc.collect()  # the call closed its coroutine: no "never awaited" warning (warnings are errors here)


async def test_route_calls_need_flashpoint_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)  # mock the OS: a user who did not set it
    default_connection.use(None)

    with pytest.raises(ConfigError, match="set FLASHPOINT_URL"):
        await Endpoint(id="my-api").post("/echo", {})
    assert default_connection._current is None  # no embedded plane was started to find that out


# --------------------------------------------------------------------------------------------------------------------
# Flash's signatures (runpod-flash 1.21.0, endpoint.py), which the drift guard does not compare


def _params(fn: Any) -> list[tuple[str, str, Any]]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def test_client_verbs_take_flash_parameters() -> None:
    empty = inspect.Parameter.empty
    assert _params(EndpointClient.run) == [
        ("input_data", "POSITIONAL_OR_KEYWORD", empty),
        ("webhook", "KEYWORD_ONLY", None),
    ]
    assert _params(EndpointClient.runsync) == [
        ("input_data", "POSITIONAL_OR_KEYWORD", empty),
        ("timeout", "POSITIONAL_OR_KEYWORD", 60.0),
    ]
    assert _params(EndpointClient.cancel) == [("job_id", "POSITIONAL_OR_KEYWORD", empty)]
    for verb in ("get", "post", "put", "delete", "patch"):
        # Flash: (path, data=None, **kwargs), of which it reads timeout (default 60.0)
        assert _params(getattr(EndpointClient, verb)) == [
            ("path", "POSITIONAL_OR_KEYWORD", empty),
            ("data", "POSITIONAL_OR_KEYWORD", None),
            ("timeout", "KEYWORD_ONLY", 60.0),
        ]
    command = Endpoint(name="cmd", gpu=GpuType.NVIDIA_H200, worker_command=["python", "echo.py"])
    assert _params(command.run) == _params(EndpointClient.run)
    assert _params(command.runsync) == _params(EndpointClient.runsync)
    assert _params(command.cancel) == _params(EndpointClient.cancel)


def test_endpoint_job_has_flash_members() -> None:
    for name in ("id", "output", "error", "done"):
        assert isinstance(inspect.getattr_static(EndpointJob, name), property), name
    assert _params(EndpointJob.status) == []
    assert _params(EndpointJob.cancel) == []
    assert _params(EndpointJob.wait) == [("timeout", "POSITIONAL_OR_KEYWORD", None)]
    for name in ("status", "cancel", "wait"):
        assert inspect.iscoroutinefunction(getattr(EndpointJob, name)), name


# --------------------------------------------------------------------------------------------------------------------
# EndpointJob's error string, and webhooks


class Ended:
    """A connection with one job that has ended: the least a Connection needs for an EndpointJob to read it."""

    def __init__(self, view: JobView) -> None:
        self.view = view

    async def get(self, job_id: str) -> JobView:
        return self.view


def _ended(status: JobStatus, error: JobError | None, reason: Reason | None) -> JobView:
    queued = JobView.queued("j-1", "ep")
    return JobView(**{**{f: getattr(queued, f) for f in queued.__dataclass_fields__}, "status": status,
                      "error": error, "reason": reason})  # fmt: skip


@pytest.mark.parametrize(
    ("status", "error", "reason", "expected"),
    [
        (JobStatus.FAILED, JobError("ValueError", "bad prompt", "Traceback ..."), Reason.USER_ERROR, "bad prompt"),
        (JobStatus.TIMED_OUT, JobError("TimeoutError", "execution exceeded 5 ms"), None, "execution exceeded 5 ms"),
        (JobStatus.CANCELLED, None, Reason.CANCELLED, "CANCELLED"),  # a record without an error still says why
        (JobStatus.COMPLETED, None, Reason.COMPLETED, None),
        (JobStatus.IN_PROGRESS, None, None, None),
    ],
)
async def test_error_is_the_message_of_a_job_that_ended_without_output(
    status: JobStatus, error: JobError | None, reason: Reason | None, expected: str | None
) -> None:
    conn: Any = Ended(_ended(status, error, reason))
    job = EndpointJob(conn, JobView.queued("j-1", "ep"))
    assert job.error is None and not job.done  # nothing fetched yet

    assert await job.status() == status.value
    assert job.error == expected
    assert job.done is status.terminal
    assert (job.failure is None) is (status in (JobStatus.COMPLETED, JobStatus.IN_PROGRESS))


def test_webhooks_need_a_flashpoint_server() -> None:
    in_process: Connection = Ended(JobView.queued("j", "ep"))  # type: ignore[assignment]
    server = HTTPConnection("http://127.0.0.1:9")

    assert with_webhook(in_process, {"k": 1}, None) == {"k": 1}
    assert with_webhook(server, {"k": 1}, "https://h/") == {"k": 1, "webhook": "https://h/"}
    with pytest.raises(ConfigError, match="webhook= is delivered by a flashpoint server"):
        with_webhook(in_process, {}, "https://h/")


# --------------------------------------------------------------------------------------------------------------------
# A worker_command endpoint (Flash's image= client): unmodified Runpod handlers on the embedded default


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_command_endpoint_returns_endpoint_jobs(make_embedded) -> None:
    pytest.importorskip("runpod")
    make_embedded("NVIDIA_H200:2")
    echo = Endpoint(name="cmd-echo", gpu=GpuType.NVIDIA_H200, worker_command=["python", "echo.py"],
                    worker_cwd=HANDLERS)  # fmt: skip
    errors = Endpoint(name="cmd-errors", gpu=GpuType.NVIDIA_H200, worker_command=["python", "errors.py"],
                      worker_cwd=HANDLERS)  # fmt: skip

    job = await echo.runsync({"prompt": "a red fox"})
    assert isinstance(job, EndpointJob) and job.done and job.error is None
    assert job.output["input"] == {"prompt": "a red fox"} and job.output["gpu"] == "NVIDIA H200"
    assert job.view.placement is not None and job.view.placement.gpu_model == "NVIDIA H200"

    queued = await echo.run({"n": 2})
    assert await queued.wait(timeout=60) is queued and queued.output["input"] == {"n": 2}
    again = echo.job(queued.id)
    assert await again.status() == "COMPLETED" and again.output == queued.output

    raised = await errors.runsync({"mode": "raise", "why": "on purpose"})
    assert raised.error == "raised on purpose" and raised.output is None
    assert raised.failure is not None and raised.failure.remote_type == "ValueError"
    returned = await errors.runsync({"mode": "return", "why": "politely"})
    assert returned.error == "returned politely"

    with pytest.raises(ConfigError, match="webhook= is delivered by a flashpoint server"):
        await echo.run({"n": 3}, webhook="https://hooks.example.com/")


# --------------------------------------------------------------------------------------------------------------------
# Against a real `flashpoint serve`: Flash's function_name on a shared endpoint, and a webhook delivered

SHARED_APP = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="tts", gpu=GpuGroup.ANY)
def speak(text: str) -> dict:
    return {"said": text}


@Endpoint(name="tts", gpu=GpuGroup.ANY)
def voices(lang: str = "en") -> list:
    return [lang + "-a", lang + "-b"]
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_webhook_reaches_its_receiver_through_flashpoint_serve(
    serve: Any, route_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = serve("--allow-private-webhooks")  # the receiver is on loopback
    monkeypatch.setenv("FLASHPOINT_URL", served.url)  # mock the OS: a client-mode user
    connection = HTTPConnection(served.url, served.key)
    default_connection.use(connection)
    HOOKS.clear()
    try:
        job = await Endpoint(id="echo").run({"k": "hook"}, webhook=f"{route_server}/hooks/done")
        assert (await job.wait(timeout=60)).output["payload"] == {"k": "hook"}

        async def delivered() -> bool:
            return any(body.get("id") == job.id for body in HOOKS)

        await eventually_async(delivered, timeout=30, what="the webhook delivery")
        [body] = [body for body in HOOKS if body.get("id") == job.id]
        assert body["status"] == "COMPLETED" and body["output"]["payload"] == {"k": "hook"}
    finally:
        default_connection.use(None)
        await connection.aclose()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_served_shared_endpoint_called_by_function_name(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tmp_path / "tts_app.py"
    app.write_text(SHARED_APP)
    served = serve(app=str(app))
    monkeypatch.setenv("FLASHPOINT_URL", served.url)  # mock the OS: a client-mode user
    connection = HTTPConnection(served.url, served.key)
    default_connection.use(connection)
    try:
        tts = Endpoint(id="tts")
        with pytest.raises(BadInputError, match="sing"):
            await tts.run({"function_name": "sing", "text": "la"})
        # Flash's key names the function of the shared endpoint; the client sends the input as it is
        voices = await tts.runsync({"function_name": "voices", "lang": "fr"})
        assert voices.output == ["fr-a", "fr-b"] and voices.error is None
        said = await tts.runsync({"function_name": "speak", "text": "hi"})
        assert said.output == {"said": "hi"}
    finally:
        default_connection.use(None)
        await connection.aclose()
