"""Client mode: ``HTTPConnection`` and ``Endpoint(id=...)`` over real HTTP on loopback.

The server is a fake servicer (a small Starlette app with canned jobs behind a real uvicorn socket, as modal's tests
fake their server): it speaks the routes flashpoint's server serves, so the client's parsing, error mapping, long polls
and streaming are tested without scheduling anything.
"""

from __future__ import annotations

import asyncio
import copy as copy_module
import gc
import inspect
import pickle
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from flashpoint import Endpoint, EndpointJob, GpuType, errors
from flashpoint.errors import (
    BackendError,
    BadInputError,
    ConfigError,
    Error,
    InvalidEndpointError,
    JobCancelledError,
    JobFailedError,
    NotFoundError,
)
from flashpoint.explain import Code, Explanation, WaitReason as Why
from flashpoint.jobs import JobError, JobStatus, JobView, Placement, Reason
from flashpoint.sdk import default_connection
from flashpoint.sdk.client import ERRORS_BY_CODE, REJECTED_CODES, HTTPConnection
from flashpoint.sdk.endpoint import EndpointClient, WorkerTarget
from flashpoint.wire import codec

pytestmark = pytest.mark.timeout(30)

SERVED = ("echo", "boom", "slow", "gen", "genboom")
TRACEBACK = 'Traceback (most recent call last):\n  File "app.py", line 3, in boom\nValueError: bad prompt\n'
#: an output JSON cannot carry, as the server sends it to SDK callers: a stream chunk with its encoding beside it
TUPLE_CHUNK = codec.encode_output(("tuple", 1), binary_ok=True)


# --------------------------------------------------------------------------------------------------------------------
# The fake servicer


@dataclass
class FakeJob:
    view: JobView
    #: what the job becomes once waited for (None: it never ends by itself)
    final: JobView | None
    #: successive answers of the stream route: (status, chunks)
    stream: list[tuple[str, list[Any]]] = field(default_factory=list)


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    auth: str | None
    body: Any


class Fake:
    """State of the fake server; reset for every test."""

    def __init__(self) -> None:
        self.url = ""
        self.api_key: str | None = None
        self.jobs: dict[str, FakeJob] = {}
        self.seen: list[Seen] = []

    def reset(self) -> None:
        self.api_key = None
        self.jobs.clear()
        self.seen.clear()

    def paths(self, method: str, fragment: str = "") -> list[Seen]:
        return [s for s in self.seen if s.method == method and fragment in s.path]


def _view(job_id: str, endpoint: str, status: JobStatus, **fields: Any) -> JobView:
    values: dict[str, Any] = {
        "reason": None,
        "output": None,
        "error": None,
        "delay_time_ms": None,
        "execution_time_ms": None,
        "worker_id": None,
        "placement": None,
        "retries": 0,
        "created_at": 1_700_000_000.5,
        **fields,
    }
    return JobView(id=job_id, endpoint=endpoint, status=status, **values)


def _ended(view: JobView, status: JobStatus, **fields: Any) -> JobView:
    return _view(view.id, view.endpoint, status, **fields)


def _explanation(endpoint: str, job_id: str | None = None) -> Explanation:
    return Explanation(
        endpoint=endpoint,
        summary="waiting for an NVIDIA H200 held by other endpoints",
        reasons=(Why("NVIDIA H200", Code.BUSY, "2 of 2 devices held", ("other",)),),
        job_id=job_id,
        status="IN_QUEUE" if job_id else None,
        position=1 if job_id else None,
        queue_depth=1,
        workers={"running": 0},
        fleet="2x NVIDIA H200 (simulated)",
    )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "code": code, "message": message}, status_code=status)


def fake_app(fake: Fake) -> Starlette:
    async def record(request: Request) -> Response | None:
        raw = await request.body()
        fake.seen.append(
            Seen(
                request.method,
                request.url.path,
                dict(request.query_params),
                request.headers.get("authorization"),
                await request.json() if raw else None,
            )
        )
        if fake.api_key and request.headers.get("authorization") != f"Bearer {fake.api_key}":
            return _error(401, "unauthorized", "send the API key as Authorization: Bearer KEY")
        return None

    def job_or_404(job_id: str) -> FakeJob | Response:
        job = fake.jobs.get(job_id)
        return job if job is not None else _error(404, "not_found", f"no job {job_id!r}")

    def native(job: FakeJob) -> JSONResponse:
        return JSONResponse({**job.view.to_native(), "explanation": _explanation(job.view.endpoint).to_json()})

    async def run(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        endpoint = request.path_params["endpoint"]
        body = fake.seen[-1].body
        if endpoint == "raise":  # the input says what to answer: error injection for the mapping tests
            spec = body["input"]
            if "text" in spec:
                return PlainTextResponse(spec["text"], status_code=spec["status"])
            return _error(spec["status"], spec["code"], spec["message"])
        if endpoint not in SERVED:
            return _error(404, "not_found", f"no endpoint {endpoint!r}")
        if not isinstance(body, dict) or "input" not in body:
            return _error(400, "missing_input", 'the body has no "input"; send {"input": {...}}')
        job_id = f"job-{len(fake.jobs) + 1}"
        queued = _view(job_id, endpoint, JobStatus.IN_QUEUE)
        job = FakeJob(queued, None)
        if endpoint == "echo":
            # like a worker: plain JSON comes back as it is; binary arguments come back decoded, as a binary output
            # marked beside the output (out of band)
            payload = body["input"]
            result = {"output": payload}
            if isinstance(payload, dict) and codec.PICKLE_KEY in payload:
                args, kwargs = codec.decode_call(payload)
                result = codec.encode_output({"args": list(args), "kwargs": kwargs}, binary_ok=True)
            job.final = _ended(
                queued,
                JobStatus.COMPLETED,
                reason=Reason.COMPLETED,
                output=result["output"],
                output_binary=codec.is_binary(result),
                delay_time_ms=5,
                execution_time_ms=7,
                worker_id="w-1",
                placement=Placement("node-a", "NVIDIA H200", (0,), True),
                logs=("loaded", "done"),
            )
        elif endpoint == "boom":
            job.final = _ended(
                queued,
                JobStatus.FAILED,
                reason=Reason.USER_ERROR,
                error=JobError("ValueError", "bad prompt", TRACEBACK),
                worker_id="w-2",
            )
        elif endpoint == "gen":
            job.final = _ended(queued, JobStatus.COMPLETED, reason=Reason.COMPLETED)
            job.stream = [("IN_PROGRESS", [{"output": "a"}, TUPLE_CHUNK]), ("COMPLETED", [{"output": "c"}])]
        elif endpoint == "genboom":
            job.final = _ended(
                queued, JobStatus.FAILED, reason=Reason.USER_ERROR, error=JobError("RuntimeError", "gpu fell over")
            )
            job.stream = [("IN_PROGRESS", [{"output": 1}])]
        fake.jobs[job_id] = job
        return JSONResponse({"id": job_id, "status": "IN_QUEUE"})

    async def cancel(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        job = job_or_404(request.path_params["job_id"])
        if not isinstance(job, FakeJob) or job.view.endpoint != request.path_params["endpoint"]:
            return _error(404, "not_found", "no such job on this endpoint")
        if not job.view.status.terminal:
            # as the plane records it
            error = JobError("Cancelled", "cancelled before it finished")
            job.view = _ended(job.view, JobStatus.CANCELLED, reason=Reason.CANCELLED, error=error)
            job.final = job.view
        return JSONResponse({"id": job.view.id, "status": job.view.status.value})

    async def stream(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        job = job_or_404(request.path_params["job_id"])
        if not isinstance(job, FakeJob):
            return job
        if job.stream:
            status, chunks = job.stream.pop(0)
        else:
            assert job.final is not None
            job.view = job.final
            status, chunks = job.view.status.value, []
        return JSONResponse({"id": job.view.id, "status": status, "stream": chunks})

    async def get_job(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        job = job_or_404(request.path_params["job_id"])
        return native(job) if isinstance(job, FakeJob) else job

    async def wait_job(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        job = job_or_404(request.path_params["job_id"])
        if not isinstance(job, FakeJob):
            return job
        hold = float(request.query_params.get("timeout", "30"))
        if not 0 <= hold <= 60:
            return _error(400, "bad_request", "timeout must be between 0 and 60 seconds")
        if job.final is not None:
            job.view = job.final
        else:
            await asyncio.sleep(hold)
        return native(job)

    async def explain_job(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        job = job_or_404(request.path_params["job_id"])
        if not isinstance(job, FakeJob):
            return job
        return JSONResponse(_explanation(job.view.endpoint, job.view.id).to_json())

    async def endpoints(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        return JSONResponse({"endpoints": [{"name": name, "gpu": "NVIDIA H200"} for name in SERVED]})

    async def endpoint(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        name = request.path_params["name"]
        if name not in SERVED:
            return _error(404, "not_found", f"no endpoint {name!r}")
        return JSONResponse({"name": name, "gpu": "NVIDIA H200"})

    async def explain_endpoint(request: Request) -> Response:
        if (denied := await record(request)) is not None:
            return denied
        name = request.path_params["name"]
        if name not in SERVED:
            return _error(404, "not_found", f"no endpoint {name!r}")
        return JSONResponse(_explanation(name).to_json())

    return Starlette(
        routes=[
            Route("/v2/{endpoint}/run", run, methods=["POST"]),
            Route("/v2/{endpoint}/cancel/{job_id}", cancel, methods=["POST"]),
            Route("/v2/{endpoint}/stream/{job_id}", stream, methods=["GET"]),
            Route("/v1/endpoints", endpoints, methods=["GET"]),
            Route("/v1/endpoints/{name}", endpoint, methods=["GET"]),
            Route("/v1/endpoints/{name}/explain", explain_endpoint, methods=["GET"]),
            Route("/v1/jobs/{job_id}", get_job, methods=["GET"]),
            Route("/v1/jobs/{job_id}/wait", wait_job, methods=["GET"]),
            Route("/v1/jobs/{job_id}/explain", explain_job, methods=["GET"]),
        ]
    )


@pytest.fixture(scope="module")
def fake_server() -> Iterator[Fake]:
    """The fake on 127.0.0.1, port 0: uvicorn serving a pre-bound socket from its own thread and event loop."""
    fake = Fake()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted sockets inherit it: without it, a response's head and body wait on a delayed ACK (40 ms each)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    fake.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    uv = uvicorn.Server(uvicorn.Config(fake_app(fake), log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(uv.serve(sockets=[sock])), name="fake-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the fake server did not start"
        time.sleep(0.01)
    yield fake
    uv.should_exit = True
    thread.join(20)
    sock.close()


@pytest.fixture
def fake(fake_server: Fake) -> Fake:
    fake_server.reset()
    return fake_server


@pytest.fixture
async def conn(fake: Fake) -> AsyncIterator[HTTPConnection]:
    connection = HTTPConnection(fake.url)
    yield connection
    await connection.aclose()


@pytest.fixture
def served(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> Iterator[HTTPConnection]:
    """Client mode as the SDK sees it: FLASHPOINT_URL set and an HTTPConnection in use."""
    monkeypatch.setenv("FLASHPOINT_URL", fake.url)  # mock the OS: the environment of a client-mode user
    connection = HTTPConnection(fake.url)
    default_connection.use(connection)
    yield connection
    default_connection.use(None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --------------------------------------------------------------------------------------------------------------------
# HTTPConnection: the Connection verbs


async def test_submit_posts_input_and_extra_and_returns_a_queued_view(fake: Fake, conn: HTTPConnection) -> None:
    view = await conn.submit("echo", {"data": {"x": 1}}, {"flashpoint": {"binary_ok": True}, "webhook": "http://h/"})

    assert (view.id, view.endpoint, view.status) == ("job-1", "echo", JobStatus.IN_QUEUE)
    assert view.output is None and view.error is None
    [seen] = fake.paths("POST", "/run")
    assert seen.path == "/v2/echo/run"
    assert seen.body == {"input": {"data": {"x": 1}}, "flashpoint": {"binary_ok": True}, "webhook": "http://h/"}


async def test_call_waits_and_parses_every_field_of_the_native_view(fake: Fake, conn: HTTPConnection) -> None:
    view = await conn.call("echo", {"data": [1, 2]}, {})

    assert view == fake.jobs["job-1"].final
    assert view.placement == Placement("node-a", "NVIDIA H200", (0,), True)
    assert (view.delay_time_ms, view.execution_time_ms, view.worker_id) == (5, 7, "w-1")
    assert view.logs == ("loaded", "done")
    [wait] = fake.paths("GET", "/wait")
    assert wait.path == "/v1/jobs/job-1/wait" and wait.query == {"timeout": "50"}  # no deadline: the longest hold


async def test_get_returns_the_current_view(fake: Fake, conn: HTTPConnection) -> None:
    job = await conn.submit("echo", {}, {})

    assert (await conn.get(job.id)).status is JobStatus.IN_QUEUE
    await conn.wait(job.id, 5)
    assert await conn.get(job.id) == fake.jobs[job.id].final


async def test_failed_job_view_carries_the_remote_error(conn: HTTPConnection) -> None:
    view = await conn.call("boom", {}, {})

    assert view.status is JobStatus.FAILED and view.reason is Reason.USER_ERROR
    assert view.error == JobError("ValueError", "bad prompt", TRACEBACK)


async def test_wait_raises_builtin_timeout_error_when_the_deadline_passes(fake: Fake, conn: HTTPConnection) -> None:
    job = await conn.submit("slow", {}, {})
    started = time.monotonic()

    with pytest.raises(TimeoutError, match=f"job {job.id} did not finish within 0.3s"):
        await conn.wait(job.id, 0.3)

    assert 0.3 <= time.monotonic() - started < 5
    holds = [float(s.query["timeout"]) for s in fake.paths("GET", "/wait")]
    assert holds and all(hold <= 0.3 for hold in holds)  # never asks the server to hold past the deadline


async def test_wait_with_zero_timeout_asks_once(fake: Fake, conn: HTTPConnection) -> None:
    job = await conn.submit("slow", {}, {})

    with pytest.raises(TimeoutError):
        await conn.wait(job.id, 0)
    assert [s.query for s in fake.paths("GET", "/wait")] == [{"timeout": "0"}]
    assert (await conn.wait((await conn.submit("echo", {}, {})).id, 0)).status is JobStatus.COMPLETED


async def test_cancel_posts_to_the_job_endpoint_then_reads_the_job(fake: Fake, conn: HTTPConnection) -> None:
    job = await conn.submit("slow", {}, {})

    view = await conn.cancel(job.id)

    assert view.status is JobStatus.CANCELLED and view.reason is Reason.CANCELLED
    assert [s.path for s in fake.paths("POST", "/cancel")] == [f"/v2/slow/cancel/{job.id}"]


async def test_cancel_of_a_job_this_connection_never_saw_looks_up_its_endpoint(
    fake: Fake, conn: HTTPConnection
) -> None:
    job = await conn.submit("slow", {}, {})
    other = HTTPConnection(fake.url)

    assert (await other.cancel(job.id)).status is JobStatus.CANCELLED
    assert [s.path for s in fake.paths("POST", "/cancel")] == [f"/v2/slow/cancel/{job.id}"]
    await other.aclose()


async def test_explanations_parse_back_to_equal_objects(conn: HTTPConnection) -> None:
    job = await conn.submit("slow", {}, {})

    assert await conn.explain_endpoint("echo") == _explanation("echo")
    assert await conn.explain_job(job.id) == _explanation("slow", job.id)


async def test_register_checks_the_endpoint_and_uploads_nothing(fake: Fake, conn: HTTPConnection) -> None:
    @Endpoint(name="echo")
    async def echo(data: dict[str, Any]) -> dict[str, Any]:
        return data

    await conn.register(echo.spec, WorkerTarget(pickled=b"code the server never sees"))

    assert [(s.method, s.path) for s in fake.seen] == [("GET", "/v1/endpoints/echo")]


async def test_register_of_an_unknown_endpoint_names_the_server_and_what_it_serves(
    fake: Fake, conn: HTTPConnection
) -> None:
    with pytest.raises(NotFoundError) as info:
        await conn.check_endpoint("missing")

    message = str(info.value)
    for phrase in (
        fake.url,
        "'missing'",
        "it serves boom, echo, gen, genboom, slow",
        "flashpoint serve",
        "FLASHPOINT_URL",
    ):
        assert phrase in message, message


async def test_one_client_serves_concurrent_calls_on_one_loop(conn: HTTPConnection) -> None:
    views = await asyncio.gather(*(conn.call("echo", {"n": i}, {}) for i in range(20)))

    assert [v.output for v in views] == [{"n": i} for i in range(20)]
    assert len(conn._clients) == 1


def test_one_client_per_event_loop_across_asyncio_run_calls(fake: Fake) -> None:
    conn = HTTPConnection(fake.url)
    clients: list[Any] = []

    async def once() -> JobStatus:
        client = await conn._client()
        assert await conn._client() is client  # reused within its loop
        clients.append(client)
        return (await conn.call("echo", {"n": 1}, {})).status

    assert asyncio.run(once()) is JobStatus.COMPLETED
    assert clients[0].is_closed  # closed when asyncio.run shut its loop down
    assert asyncio.run(once()) is JobStatus.COMPLETED
    assert clients[1] is not clients[0] and clients[1].is_closed
    assert len(conn._clients) <= 1  # the first loop's entry went when the second client was made
    gc.collect()  # an unclosed socket would warn here, and warnings are errors


# --------------------------------------------------------------------------------------------------------------------
# HTTPConnection: streaming


async def test_stream_yields_decoded_chunks_in_order_until_the_job_ends(fake: Fake, conn: HTTPConnection) -> None:
    chunks = [chunk async for chunk in conn.stream("gen", {"n": 3}, {"flashpoint": {"binary_ok": True}})]

    assert chunks == ["a", ("tuple", 1), "c"]
    polls = fake.paths("GET", "/stream/")
    assert [s.query for s in polls] == [{"wait": "25000"}] * 3  # chunks, last chunks with COMPLETED, then empty
    assert fake.paths("GET", "/v1/jobs/") == []  # a completed stream needs no extra read


async def test_stream_of_a_failing_job_yields_what_came_then_raises_job_failed(conn: HTTPConnection) -> None:
    chunks: list[Any] = []

    with pytest.raises(JobFailedError) as info:
        async for chunk in conn.stream("genboom", {}, {}):
            chunks.append(chunk)

    assert chunks == [1]
    assert info.value.remote_type == "RuntimeError" and info.value.remote_message == "gpu fell over"
    assert info.value.status == "FAILED" and "ended FAILED" in str(info.value)


# --------------------------------------------------------------------------------------------------------------------
# HTTPConnection: errors


def test_the_code_table_covers_every_error_class() -> None:
    classes = [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, errors.Error) and value.__module__ == errors.__name__
    ]

    assert {cls.code: cls for cls in classes} == ERRORS_BY_CODE


WIRE_ERRORS = [
    *((code, cls, 409) for code, cls in ERRORS_BY_CODE.items()),
    *((code, BadInputError, 400) for code in sorted(REJECTED_CODES)),
    ("no_such_code", Error, 418),
]


@pytest.mark.parametrize(("code", "kind", "status"), WIRE_ERRORS, ids=[w[0] for w in WIRE_ERRORS])
async def test_error_bodies_map_back_to_the_class_with_that_code(
    conn: HTTPConnection, code: str, kind: type[Error], status: int
) -> None:
    with pytest.raises(Error) as info:
        await conn.submit("raise", {"status": status, "code": code, "message": "what went wrong"}, {})

    assert type(info.value) is kind
    assert str(info.value) == "what went wrong"
    if kind is BadInputError:
        assert info.value.code == code


async def test_not_found_job_is_not_found_error(conn: HTTPConnection) -> None:
    with pytest.raises(NotFoundError, match="no job 'nope'"):
        await conn.get("nope")


async def test_an_error_without_a_json_body_is_an_error_quoting_it(fake: Fake, conn: HTTPConnection) -> None:
    with pytest.raises(Error) as info:
        await conn.submit("raise", {"status": 502, "text": "<html>bad gateway</html>"}, {})

    assert type(info.value) is Error
    for phrase in (fake.url, "HTTP 502", "bad gateway"):
        assert phrase in str(info.value)


async def test_a_success_without_a_json_body_is_an_error(conn: HTTPConnection) -> None:
    with pytest.raises(Error, match="not JSON"):
        await conn.submit("raise", {"status": 200, "text": "ok"}, {})


@pytest.mark.parametrize(("key", "phrase"), [(None, "needs an API key"), ("wrong", "refused the API key")])
async def test_unauthorized_says_to_set_flashpoint_api_key(fake: Fake, key: str | None, phrase: str) -> None:
    fake.api_key = "sekret"
    conn = HTTPConnection(fake.url, key)

    with pytest.raises(ConfigError) as info:
        await conn.get("job-1")

    assert phrase in str(info.value) and "FLASHPOINT_API_KEY" in str(info.value) and fake.url in str(info.value)
    await conn.aclose()


async def test_the_api_key_goes_as_a_bearer_token_on_every_route(fake: Fake) -> None:
    fake.api_key = "sekret"
    conn = HTTPConnection(fake.url, " sekret , other-key")  # FLASHPOINT_API_KEY may list several: the first is sent

    await conn.check_endpoint("echo")
    view = await conn.call("echo", {}, {})
    await conn.cancel(view.id)

    assert {s.auth for s in fake.seen} == {"Bearer sekret"}
    await conn.aclose()


async def test_connection_refused_is_backend_error_saying_what_to_do() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    conn = HTTPConnection(url)

    with pytest.raises(BackendError) as info:
        await conn.get("job-1")

    for phrase in (url, "flashpoint serve", "unset FLASHPOINT_URL"):
        assert phrase in str(info.value)
    await conn.aclose()


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "", "ftp://host"])
def test_a_url_that_is_not_http_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="http"):
        HTTPConnection(url)


def test_trailing_slash_is_dropped() -> None:
    assert HTTPConnection("http://127.0.0.1:8000/").url == "http://127.0.0.1:8000"


# --------------------------------------------------------------------------------------------------------------------
# Decorated endpoints in client mode


async def test_decorated_call_runs_on_the_server_with_binary_arguments(fake: Fake, served: HTTPConnection) -> None:
    @Endpoint(name="echo", gpu=GpuType.NVIDIA_H200)
    async def echo(data: Any) -> Any:
        return data

    assert await echo({"x": 1}) == {"data": {"x": 1}}  # the fake echoes the job's input
    # a tuple travels in the binary envelope and comes back decoded
    assert await echo((1, 2)) == {"args": [], "kwargs": {"data": (1, 2)}}
    assert fake.paths("POST", "/run")[0].body == {"input": {"data": {"x": 1}}, "flashpoint": {"binary_ok": True}}
    assert len(fake.paths("GET", "/v1/endpoints/echo")) == 1  # registered (checked) once per handle


async def test_decorated_job_handle_works_over_http(served: HTTPConnection) -> None:
    @Endpoint(name="boom")
    async def boom(prompt: str) -> str:
        return prompt

    job = await boom.run("hi")
    assert await job.status() == "IN_QUEUE"
    with pytest.raises(JobFailedError) as info:
        await job.result(timeout=5)
    assert info.value.remote_type == "ValueError" and "Remote traceback" in str(info.value)
    assert job.error is not None and job.error.remote_message == "bad prompt"


async def test_decorated_call_to_an_endpoint_the_server_lacks_lists_what_it_serves(served: HTTPConnection) -> None:
    @Endpoint(name="missing")
    async def missing() -> None: ...

    with pytest.raises(NotFoundError, match="has no endpoint 'missing' .*boom, echo") as info:
        await missing()
    assert "unset FLASHPOINT_URL" in str(info.value)


async def test_inside_a_worker_a_missing_endpoint_says_how_the_plane_learns_it(
    served: HTTPConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHPOINT_CALLER_URL", served.url + "/")  # what a worker of this plane is given

    @Endpoint(name="missing")
    async def missing() -> None: ...

    with pytest.raises(NotFoundError, match="plane that runs this worker has no endpoint 'missing'") as info:
        await missing()
    message = str(info.value)
    assert "name it in the code of an endpoint the script calls" in message and "FLASHPOINT_URL" not in message


async def test_stream_of_a_generator_endpoint_yields_its_chunks(fake: Fake, served: HTTPConnection) -> None:
    @Endpoint(name="gen")
    async def gen(n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i

    assert [chunk async for chunk in gen.stream(3)] == ["a", ("tuple", 1), "c"]
    assert fake.paths("POST", "/run")[0].body == {"input": {"n": 3}, "flashpoint": {"binary_ok": True}}


async def test_stream_of_a_sync_generator_endpoint_is_allowed(served: HTTPConnection) -> None:
    @Endpoint(name="genboom")
    def gen(n: int) -> Iterator[int]:
        yield from range(n)

    with pytest.raises(JobFailedError, match="RuntimeError: gpu fell over"):
        async for _ in gen.stream(n=2):
            pass


def test_stream_of_a_non_generator_endpoint_says_to_await_it() -> None:
    @Endpoint(name="echo")
    async def echo(data: dict[str, Any]) -> dict[str, Any]:
        return data

    with pytest.raises(TypeError, match=r"does not stream; use `await echo\(\.\.\.\)`"):
        echo.stream({})


def test_stream_with_wrong_arguments_fails_at_the_call() -> None:
    @Endpoint(name="gen")
    async def gen(n: int) -> AsyncIterator[int]:
        yield n

    with pytest.raises(TypeError, match="gen"):
        gen.stream(1, 2)


# --------------------------------------------------------------------------------------------------------------------
# Endpoint(id=...)


def test_endpoint_id_is_a_client_and_an_endpoint() -> None:
    ep = Endpoint(id="echo")

    assert isinstance(ep, EndpointClient) and isinstance(ep, Endpoint)
    assert ep.id == "echo"
    assert repr(ep) == "<Endpoint id='echo' (served)>"


INVALID_IDS = {
    "with-gpu": (
        {"id": "echo", "gpu": GpuType.NVIDIA_H200},
        ["Endpoint(id=...)", "(gpu)", "Endpoint(id='echo') alone"],
    ),
    "with-name": ({"id": "echo", "name": "other"}, ["FLASHPOINT_URL", "(name)", "server's @Endpoint"]),
    "with-two": ({"id": "echo", "workers": 2, "env": {}}, ["(env, workers)"]),
    "bad-name": ({"id": "no spaces"}, ["name of the served endpoint", "Endpoint(id='inference')", "'no spaces'"]),
    "not-a-string": ({"id": 42}, ["name of the served endpoint", "got 42"]),
    "empty": ({"id": ""}, ["name of the served endpoint"]),
}


@pytest.mark.parametrize(("options", "phrases"), INVALID_IDS.values(), ids=INVALID_IDS.keys())
def test_endpoint_id_with_other_options_or_a_bad_name_is_invalid(options: dict[str, Any], phrases: list[str]) -> None:
    with pytest.raises(InvalidEndpointError) as info:
        Endpoint(**options)

    for phrase in phrases:
        assert phrase in str(info.value), (phrase, str(info.value))


def test_positional_name_with_id_is_invalid() -> None:
    with pytest.raises(InvalidEndpointError, match=r"\(name\)"):
        Endpoint("echo", id="echo")


def test_endpoint_id_client_pickles_by_name_without_its_connection(served: HTTPConnection) -> None:
    ep = Endpoint(id="echo")
    ep._conn = served

    copy = pickle.loads(cloudpickle.dumps(ep))

    assert type(copy) is EndpointClient and copy.id == "echo" and copy._conn is None


def test_a_declaration_still_copies_and_pickles() -> None:
    declared = Endpoint(name="echo", gpu=GpuType.NVIDIA_H200, workers=(0, 2))

    for copy in (pickle.loads(pickle.dumps(declared)), copy_module.copy(declared)):
        assert type(copy) is Endpoint and copy.spec == declared.spec


def test_endpoint_id_none_is_a_plain_declaration() -> None:
    ep = Endpoint(name="echo", id=None)

    assert type(ep) is Endpoint and ep.spec.name == "echo"


def test_endpoint_id_cannot_decorate() -> None:
    with pytest.raises(InvalidEndpointError, match="cannot decorate infer; declare endpoints with @Endpoint"):

        @Endpoint(id="echo")
        async def infer(data: dict[str, Any]) -> dict[str, Any]:
            return data


async def test_endpoint_id_without_flashpoint_url_is_a_config_error_at_the_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)  # mock the OS: a user who did not set it
    default_connection.use(None)
    ep = Endpoint(id="echo")  # no I/O, no check yet

    with pytest.raises(ConfigError, match=r"set FLASHPOINT_URL .*flashpoint serve"):
        await ep.run({"x": 1})
    with pytest.raises(ConfigError, match="FLASHPOINT_URL"):
        ep.job("job-1")
    assert default_connection._current is None  # no embedded plane was started to find that out


async def test_endpoint_id_with_an_in_process_connection_is_a_config_error(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    class InProcess:  # a Connection without check_endpoint, as the embedded plane
        closed = False

    monkeypatch.setenv("FLASHPOINT_URL", fake.url)  # mock the OS
    default_connection.use(InProcess())  # type: ignore[arg-type]
    try:
        with pytest.raises(ConfigError, match="in-process control plane"):
            await Endpoint(id="echo").explain()
    finally:
        default_connection.use(None)


async def test_endpoint_client_run_sends_the_input_as_is(fake: Fake, served: HTTPConnection) -> None:
    ep = Endpoint(id="echo")

    job = await ep.run({"prompt": "hi", "max_tokens": 8})

    assert isinstance(job, EndpointJob) and job.id == "job-1" and not job.done
    assert await job.wait(timeout=5) is job  # Flash's wait returns the job
    assert job.done and job.output == {"prompt": "hi", "max_tokens": 8} and job.error is None
    assert fake.paths("POST", "/run")[0].body == {
        "input": {"prompt": "hi", "max_tokens": 8},
        "flashpoint": {"binary_ok": True},
    }
    assert [s.path for s in fake.seen[:1]] == ["/v1/endpoints/echo"]  # the first call checked the endpoint


async def test_endpoint_client_run_keeps_function_name_in_the_input(fake: Fake, served: HTTPConnection) -> None:
    # Flash's key naming the function of an endpoint that serves several: sent inside the input, as it is
    await Endpoint(id="echo").run({"function_name": "second", "x": 1})

    assert fake.paths("POST", "/run")[0].body["input"] == {"function_name": "second", "x": 1}


async def test_endpoint_client_run_sends_the_webhook_beside_the_input(fake: Fake, served: HTTPConnection) -> None:
    await Endpoint(id="echo").run({"x": 1}, webhook="https://hooks.example.com/done")

    body = fake.paths("POST", "/run")[0].body
    assert body["input"] == {"x": 1} and body["webhook"] == "https://hooks.example.com/done"


async def test_endpoint_client_runsync_returns_the_completed_job(served: HTTPConnection) -> None:
    job = await Endpoint(id="echo").runsync({"a": [1, 2]}, timeout=5)

    assert isinstance(job, EndpointJob) and job.done
    assert job.output == {"a": [1, 2]} and job.error is None and job.failure is None
    # flashpoint's view of the same job stays reachable
    assert job.view.placement == Placement("node-a", "NVIDIA H200", (0,), True)
    assert job.view.execution_time_ms == 7 and job.view.reason is Reason.COMPLETED
    assert await job.result() == {"a": [1, 2]}
    assert await job.status() == "COMPLETED"
    assert repr(job) == "EndpointJob(id='job-1', status='COMPLETED')"


async def test_endpoint_client_runsync_without_a_timeout_waits_as_long_as_it_takes(served: HTTPConnection) -> None:
    job = await Endpoint(id="echo").runsync({"a": 1}, timeout=None)

    assert job.done and job.output == {"a": 1}


async def test_endpoint_client_runsync_of_a_failing_job_returns_it_with_the_error(served: HTTPConnection) -> None:
    job = await Endpoint(id="boom").runsync({"prompt": ""})

    # as Flash: no exception; the error is the message as a string, the output None
    assert job.done and job.output is None
    assert job.error == "bad prompt"
    assert await job.status() == "FAILED"
    failure = job.failure
    assert isinstance(failure, JobFailedError)
    assert (failure.remote_type, failure.remote_traceback, failure.reason) == ("ValueError", TRACEBACK, "user_error")
    with pytest.raises(JobFailedError, match="bad prompt"):
        await job.result()


async def test_endpoint_client_runsync_timeout_is_timeout_error_naming_the_job(served: HTTPConnection) -> None:
    with pytest.raises(TimeoutError, match="job-1 did not finish within 0.2s"):
        await Endpoint(id="slow").runsync({}, timeout=0.2)


async def test_endpoint_job_wait_timeout_leaves_the_job_going(served: HTTPConnection) -> None:
    job = await Endpoint(id="slow").run({})

    with pytest.raises(TimeoutError):
        await job.wait(timeout=0.2)
    assert not job.done and job.error is None and job.output is None
    assert (await job.explain()).job_id == job.id


async def test_endpoint_client_job_for_an_existing_id(served: HTTPConnection) -> None:
    ep = Endpoint(id="echo")
    job = await ep.run({"n": 1})
    await job.wait(timeout=5)

    again = ep.job(job.id)

    assert isinstance(again, EndpointJob) and again.id == job.id and not again.done  # not fetched yet
    assert await again.status() == "COMPLETED" and again.output == {"n": 1} and again.done


async def test_endpoint_client_cancel_returns_the_job(served: HTTPConnection) -> None:
    ep = Endpoint(id="slow")
    job = await ep.run({})

    cancelled = await ep.cancel(job.id)

    assert isinstance(cancelled, EndpointJob) and cancelled.id == job.id
    assert cancelled.done and cancelled.error == "cancelled before it finished"
    assert isinstance(cancelled.failure, JobCancelledError)
    assert await job.status() == "CANCELLED"


async def test_endpoint_job_cancel_returns_itself(served: HTTPConnection) -> None:
    job = await Endpoint(id="slow").run({})

    assert await job.cancel() is job
    assert job.done and await job.status() == "CANCELLED"


async def test_endpoint_client_explain(served: HTTPConnection) -> None:
    assert await Endpoint(id="echo").explain() == _explanation("echo")


async def test_endpoint_client_stream(served: HTTPConnection) -> None:
    assert [chunk async for chunk in Endpoint(id="gen").stream({"n": 3})] == ["a", ("tuple", 1), "c"]


async def test_endpoint_client_of_an_unknown_endpoint_is_not_found_at_the_first_call(served: HTTPConnection) -> None:
    ep = Endpoint(id="nope")

    with pytest.raises(NotFoundError, match="no endpoint 'nope' .*it serves boom, echo, gen, genboom, slow"):
        await ep.run({})
