"""The route side's pure rules, by table: which worker takes a request, what a /ping answer means and when to ask
again, the REQUEST_COUNT scaler over requests in flight and held, idle and yield rules with requests in flight, and
the stdlib readiness probe against a real server on loopback; then ``RouteServing`` alone, on a bare plane state
through the test door: requests counted in flight exactly, held requests answered once (with a worker that became
ready, or with the endpoint's explanation), a retiring worker stopped after its last request, a worker not ready in
time handed to supervision as a failed start."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.explain import Explanation
from flashpoint.scheduler import readiness
from flashpoint.scheduler.planner import desired, idle_stops, yieldable
from flashpoint.scheduler.readiness import Verdict, verdict
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.scheduler.routeserving import RouteServing, least_in_flight, same_but_routes
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import RouteSpec, ServerlessScalerType, WorkerTarget
from tests.scheduler.door import ROUTES, add_endpoint, add_worker, plane_state, until

START, IDLE, RUN, STOP = WorkerState.STARTING, WorkerState.IDLE, WorkerState.RUNNING, WorkerState.STOPPING
RC, QD = ServerlessScalerType.REQUEST_COUNT, ServerlessScalerType.QUEUE_DELAY


def workers(*rows: tuple[WorkerState, int] | tuple[WorkerState, int, bool]) -> list[Worker]:
    """Workers ``w0, w1, ...`` in start order: (state, requests in flight[, retiring])."""
    found = []
    for n, row in enumerate(rows):
        worker = Worker(f"w{n}", "api", (), started_at=float(n), idle_since=float(n), last_exchange=0.0, state=row[0])
        worker.in_flight = row[1]
        worker.retiring = len(row) > 2 and bool(row[2])
        found.append(worker)
    return found


@pytest.mark.parametrize(
    ("rows", "chosen"),
    [
        # nobody ready: the request is held
        ([], None),
        ([(START, 0)], None),
        ([(STOP, 0), (START, 0)], None),
        ([(IDLE, 0, True)], None),  # retiring: takes nothing new
        # the fewest in flight wins
        ([(RUN, 3), (RUN, 1), (RUN, 2)], "w1"),
        ([(RUN, 1), (IDLE, 0)], "w1"),
        # a tie goes to the oldest (first started): load gathers there and the newest go idle first
        ([(RUN, 2), (RUN, 2)], "w0"),
        ([(IDLE, 0), (IDLE, 0)], "w0"),
        # starting and stopping workers never take a request, however idle they look
        ([(START, 0), (RUN, 5)], "w1"),
        ([(STOP, 0), (RUN, 5), (RUN, 4)], "w2"),
    ],
)
def test_least_in_flight_chooses_the_worker_a_request_goes_to(rows: list[tuple[WorkerState, int]], chosen: str) -> None:
    worker = least_in_flight(workers(*rows))
    assert (worker.id if worker else None) == chosen


@pytest.mark.parametrize(
    ("status", "waited", "expected"),
    [
        (200, 0.0, Verdict.READY),
        (200, 9999.0, Verdict.READY),  # a late 200 still counts
        (204, 0.0, Verdict.WAIT),  # initialising
        (None, 1.0, Verdict.WAIT),  # nothing listens yet
        (500, 1.0, Verdict.WAIT),  # unhealthy: not ready, not yet given up
        (404, 1.0, Verdict.WAIT),
        (204, 600.0, Verdict.TIMED_OUT),
        (None, 601.0, Verdict.TIMED_OUT),
        (503, 700.0, Verdict.TIMED_OUT),
    ],
)
def test_what_one_ping_answer_means(status: int | None, waited: float, expected: Verdict) -> None:
    assert verdict(status, waited, 600.0) is expected


def test_asks_come_soon_at_first_and_back_off_to_twice_a_second() -> None:
    pauses = [readiness.delay(n) for n in range(20)]
    assert pauses[0] == readiness.FIRST_DELAY_S
    assert all(a <= b for a, b in zip(pauses, pauses[1:], strict=False))
    assert pauses[-1] == readiness.MAX_DELAY_S
    assert sum(pauses[:6]) < 0.5  # a worker up within half a second is seen within about half a second
    assert readiness.delay(3, first_s=0.0, max_s=0.0) == 0.0  # the test door's: ask again at once


@pytest.mark.parametrize(
    ("address", "parts"),
    [("127.0.0.1:8000", ("127.0.0.1", 8000)), ("[::1]:9", ("::1", 9)), ("node-a:80", ("node-a", 80))],
)
def test_addresses_split_into_host_and_port(address: str, parts: tuple[str, int]) -> None:
    assert readiness.split_address(address) == parts


@pytest.mark.parametrize(
    ("status", "words"),
    [(None, "nothing answered"), (204, "204 (initialising)"), (503, "answered 503")],
)
def test_the_last_answer_in_words(status: int | None, words: str) -> None:
    assert words in readiness.describe(status)


async def test_ping_reads_the_status_of_a_real_server_and_none_where_nothing_listens() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        assert request.startswith(b"GET /ping HTTP/1.1\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await readiness.ping(f"127.0.0.1:{port}", 5.0) == 204
    finally:
        server.close()
        await server.wait_closed()
    assert await readiness.ping(f"127.0.0.1:{port}", 5.0) is None  # refused


async def test_ping_presents_the_route_secret_when_it_has_one() -> None:
    heads: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await readiness.ping(f"127.0.0.1:{port}", 5.0, "s3cret") == 200
        assert await readiness.ping(f"127.0.0.1:{port}", 5.0) == 200
    finally:
        server.close()
        await server.wait_closed()
    assert b"\r\nx-flashpoint-route-secret: s3cret\r\n" in heads[0]
    assert b"x-flashpoint-route-secret" not in heads[1]


async def test_ping_gives_up_on_a_server_that_never_answers() -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # holds the connection and says nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await readiness.ping(f"127.0.0.1:{port}", 0.05) is None
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def route_endpoint(held: int, in_flight: int, rows: list[tuple[WorkerState, int]], **options: object) -> EndpointState:
    spec = Endpoint(name="api", gpu=GpuType.NVIDIA_H200, **options).spec  # type: ignore[arg-type]
    spec = dataclasses.replace(spec, kind="routes", routes=(RouteSpec("GET", "/x", "x"),))
    ep = EndpointState(spec, WorkerTarget(import_path="x:y"), registered_at=0.0, queued=held, in_flight=in_flight)
    for worker in workers(*rows):
        ep.workers[worker.id] = worker
    return ep


@pytest.mark.parametrize(
    ("scaler", "value", "held", "rows", "want"),
    [
        # REQUEST_COUNT: ceil((held + in flight) / value), clamped to (0, 4)
        (RC, 4, 1, [], 1),  # scale from zero: one held request starts a worker
        (RC, 4, 0, [(RUN, 4)], 1),
        (RC, 4, 0, [(RUN, 5)], 2),
        (RC, 1, 3, [], 3),  # three held at once: three workers
        (RC, 1, 0, [(RUN, 9)], 4),  # capped by workers_max
        (RC, 4, 0, [(IDLE, 0), (IDLE, 0)], 0),  # nothing in flight: none wanted (idle stops do the rest)
        # QUEUE_DELAY: held requests are its queue; a ready worker takes every request, so it adds none
        (QD, 4, 1, [], 1),
        (QD, 4, 0, [(RUN, 50)], 1),
    ],
)
def test_the_scalers_count_held_requests_and_requests_in_flight(
    scaler: ServerlessScalerType, value: int, held: int, rows: list[tuple[WorkerState, int]], want: int
) -> None:
    in_flight = sum(n for _, n in rows)
    ep = route_endpoint(held, in_flight, rows, workers=(0, 4), scaler_type=scaler, scaler_value=value)
    assert desired(ep, list(ep.workers.values()), wall=0.0, oldest=None) == want


def test_a_worker_with_requests_in_flight_neither_yields_nor_stops_idle() -> None:
    ep = route_endpoint(0, 1, [(IDLE, 0), (IDLE, 1)], workers=(0, 4), idle_timeout=1)
    first, second = ep.workers.values()
    assert yieldable(first, ep, live=2)
    assert not yieldable(second, ep, live=2)  # even were its state stale, a request in flight keeps it
    assert idle_stops(ep, now=100.0) == [first]
    ep.queued = 1  # a request held: nothing is idle
    assert not yieldable(first, ep, live=2)
    assert idle_stops(ep, now=100.0) == []


def test_more_routes_declared_later_are_the_same_endpoint_and_other_options_are_not() -> None:
    base = Endpoint(name="api", gpu=GpuType.NVIDIA_H200).spec
    one = dataclasses.replace(base, kind="routes", routes=(RouteSpec("GET", "/a", "a"),))
    two = dataclasses.replace(one, routes=(*one.routes, RouteSpec("POST", "/b", "b")))
    assert same_but_routes(one, two)
    assert not same_but_routes(one, dataclasses.replace(two, workers_max=3))
    assert not same_but_routes(base, two)  # a queue endpoint never turns into routes


class Routes:
    """A ``RouteServing`` on a bare state, with a probe the test answers and callbacks it records."""

    def __init__(self, ready_timeout_s: float = 30.0) -> None:
        self.state: PlaneState = plane_state()
        self.stopped: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.kicks = 0
        self.answers: asyncio.Queue[int | None] = asyncio.Queue()
        self.routes = RouteServing(
            self.state,
            probe=self.probe,
            ready_timeout_s=ready_timeout_s,
            poll_s=(0.0, 0.0),
            credential=lambda endpoint, worker_id: f"key-{worker_id}",
            explain=lambda name: Explanation(name, "waiting", ()),
            stop_worker=lambda worker: self.stopped.append(worker.id),
            failed_start=lambda worker, why: self.failed.append((worker.id, why)),
            kick=self.kick,
            kick_if_someone_waits=lambda: None,
        )
        self.ep = add_endpoint(self.state, name="api", gpu=GpuType.NVIDIA_H200, routes=ROUTES)

    async def probe(self, address: str, timeout_s: float, secret: str = "") -> int | None:
        return await self.answers.get()

    def kick(self) -> None:
        self.kicks += 1


async def test_a_request_is_handed_to_a_ready_worker_and_counted_in_flight_until_released() -> None:
    r = Routes()
    worker = add_worker(r.state, r.ep, IDLE)
    assert r.routes.take_route_worker(r.ep) is worker
    assert (worker.state, worker.in_flight, r.ep.in_flight) == (RUN, 1, 1)
    r.routes.release_route_worker(r.ep, worker)
    assert (worker.state, worker.in_flight, r.ep.in_flight) == (IDLE, 0, 0) and r.stopped == []


async def test_a_retiring_worker_stops_once_its_last_request_is_answered() -> None:
    r = Routes()
    worker = add_worker(r.state, r.ep, IDLE)
    r.routes.take_route_worker(r.ep)
    worker.retiring = True
    assert r.routes.take_route_worker(r.ep) is None  # it takes nothing new
    r.routes.release_route_worker(r.ep, worker)
    assert r.stopped == [worker.id]


async def test_a_held_request_is_demand_and_is_answered_once_a_worker_is_ready() -> None:
    r = Routes()
    held = asyncio.ensure_future(r.routes.hold_route_worker(r.ep, 60.0))
    await asyncio.sleep(0)
    assert r.ep.queued == 1 and r.kicks == 1  # counted as queued: the scaler starts a worker for it
    worker = add_worker(r.state, r.ep)
    worker.address = "w.stub:80"
    r.routes.watch_ready(worker)
    await r.answers.put(None)  # not listening yet: asked again
    await r.answers.put(200)
    assert await held is worker
    assert worker.ever_ready and worker.in_flight == 1 and r.ep.queued == 0


async def test_held_requests_are_answered_with_the_explanation_when_given_up() -> None:
    r = Routes()
    timed_out = await r.routes.hold_route_worker(r.ep, 0.0)
    assert isinstance(timed_out, Explanation) and r.ep.queued == 0
    held = asyncio.ensure_future(r.routes.hold_route_worker(r.ep, 60.0))
    await asyncio.sleep(0)
    r.routes.give_up_held(r.ep)
    assert isinstance(await held, Explanation) and r.ep.queued == 0


async def test_a_worker_not_ready_in_time_is_handed_to_supervision_as_a_failed_start() -> None:
    r = Routes(ready_timeout_s=5.0)
    worker = add_worker(r.state, r.ep)
    worker.address = "w.stub:80"
    r.routes.watch_ready(worker)
    r.state.clock.advance(5.0)
    await r.answers.put(503)
    await until(lambda: r.failed, "the readiness poll to give up")
    ((failed, why),) = r.failed
    assert failed == worker.id and "not ready within 5s" in why and worker.state is START
    assert "not ready within 5s" in worker.stderr_tail[-1]
