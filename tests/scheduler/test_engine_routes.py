"""HTTP-route endpoints through the test door (StubBackend + FakeClock): route workers' launch and readiness, requests
held until a worker is ready (scale from zero), the worker with the fewest requests in flight, REQUEST_COUNT over
requests in flight, failed starts, idle stops and idle yield, explanations, and what a route endpoint refuses."""

from __future__ import annotations

import asyncio
import dataclasses
import signal

import pytest

from flashpoint import GpuType
from flashpoint.errors import BadInputError, InvalidEndpointError
from flashpoint.explain import Explanation
from flashpoint.scheduler.credentials import route_credential
from flashpoint.scheduler.records import Worker, WorkerState
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS
from flashpoint.spec import RouteSpec, ServerlessScalerType, WorkerTarget
from tests.scheduler.door import ROUTES, Door, open_door, until

RC = ServerlessScalerType.REQUEST_COUNT


async def held(door: Door, endpoint: str, timeout_s: float = 30.0) -> asyncio.Task[Worker | Explanation]:
    """A request held for a worker of ``endpoint`` (a task); returns once the plane counts it."""
    ep = door.plane.endpoint(endpoint)
    before = ep.queued
    task = asyncio.ensure_future(door.plane.hold_route_worker(ep, timeout_s))
    await until(lambda: ep.queued > before, "the request to be held")
    await door.settle()
    return task


async def ready_workers(door: Door, endpoint: str) -> list[Worker]:
    await door.settle()
    for worker in door.workers(endpoint):
        if worker.state is WorkerState.STARTING:
            await door.ready(worker)
    return door.workers(endpoint)


async def test_a_route_worker_serves_http_on_a_port_its_backend_chooses_with_a_queue_workers_environment() -> None:
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.settle()
    worker = door.worker("api")
    launch = door.backend.launch(worker.id)
    assert launch.http
    assert launch.argv[1:] == ["-m", "flashpoint.worker", "--routes", "--import", "tests.apps.routes_app:api"]
    assert launch.env["FLASHPOINT_WORKER_ID"] == worker.id and "RUNPOD_WEBHOOK_GET_JOB" in launch.env
    assert worker.address == f"{worker.id}.stub:80" and worker.state is WorkerState.STARTING
    assert door.plane.endpoint_rows("api")[0]["workers"][0]["address"] == worker.address


async def test_a_route_workers_command_is_pickled_code_or_its_own_command() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec = dataclasses.replace(door.routes_endpoint(name="pickled", gpu=GpuType.NVIDIA_H200), name="pickled2")
    door.plane.register(spec, WorkerTarget(pickled=b"x"), "/tmp/code.pkl")
    command = dataclasses.replace(spec, name="own")
    door.plane.register(command, WorkerTarget(command=("python", "lb_worker.py")))
    supervisor = door.plane.supervisor
    assert supervisor.argv(door.plane.endpoint("pickled2"))[-3:] == ["--routes", "--pickle", "/tmp/code.pkl"]
    argv = supervisor.argv(door.plane.endpoint("own"))
    assert argv[1:3] == ["-m", "flashpoint.worker.launch"] and argv[-1] == "lb_worker.py"  # Runpod's LB worker


async def test_a_route_worker_is_ready_only_once_its_ping_answers_200() -> None:
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.settle()
    worker = door.worker("api")
    await door.ready(worker, 204)  # initialising
    await door.ready(worker, None)  # nothing listens
    door.plane.ping("api", worker.id, [])  # the worker protocol's verbs do not make a route worker ready
    assert worker.state is WorkerState.STARTING and not worker.ever_ready
    await door.ready(worker)
    assert worker.state is WorkerState.IDLE and worker.ever_ready


async def test_a_held_request_starts_a_worker_and_gets_it_once_ready_scale_from_zero() -> None:
    # Given a route endpoint with no worker
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    await door.settle()
    assert door.backend.started == []
    # When a request arrives, then it is held, and its demand starts a worker
    request = await held(door, "api")
    (worker,) = door.workers("api")
    explanation = door.plane.explain_endpoint("api")
    assert explanation.queue_depth == 1 and {r.code.value for r in explanation.reasons} == {"worker_starting"}
    assert not request.done()
    # And once the worker is ready, the request has it, counted in flight
    await door.ready(worker)
    assert await request is worker
    assert (worker.state, worker.in_flight, door.plane.endpoint("api").queued) == (WorkerState.RUNNING, 1, 0)
    assert door.plane.health("api")["jobs"]["inProgress"] == 1
    door.plane.release_route_worker(door.plane.endpoint("api"), worker)
    assert (worker.state, worker.in_flight, door.plane.endpoint("api").in_flight) == (WorkerState.IDLE, 0, 0)


async def test_a_held_request_gives_up_after_its_wait_and_leaves_nothing_counted() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="hog", gpu=GpuType.NVIDIA_H200, workers=(1, 1))  # holds the only device for good
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200)
    await door.settle()
    ep = door.plane.endpoint("api")
    gave_up = await door.plane.hold_route_worker(ep, 0.01)  # the loop's own timer, as long-polls use
    # the explanation is the one of the request while it was held: what it waited for
    assert isinstance(gave_up, Explanation) and gave_up.queue_depth == 1
    assert {r.code.value for r in gave_up.reasons} == {"busy"} and gave_up.reasons[0].holders == ("hog",)
    assert ep.queued == 0 and door.workers("api") == []
    assert door.reasons("api") == set()  # nothing waits any more
    request = await held(door, "api")
    assert door.reasons("api") == {"busy"}
    request.cancel()  # the client hung up while held
    await asyncio.gather(request, return_exceptions=True)
    assert ep.queued == 0


async def test_requests_go_to_the_worker_with_the_fewest_in_flight_the_oldest_on_a_tie() -> None:
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(2, 2))
    await door.settle()
    first, second = await ready_workers(door, "api")
    ep = door.plane.endpoint("api")
    taken = [door.plane.take_route_worker(ep) for _ in range(3)]
    assert taken == [first, second, first]
    door.plane.release_route_worker(ep, first)
    door.plane.release_route_worker(ep, first)
    assert door.plane.take_route_worker(ep) is first  # 0 vs 1 in flight
    assert (first.in_flight, second.in_flight, ep.in_flight) == (1, 1, 2)


async def test_request_count_starts_a_worker_per_scaler_value_of_requests_in_flight_and_held() -> None:
    # Given REQUEST_COUNT with one request per worker and no worker
    door = await open_door("node-a=NVIDIA_H200:4")
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(0, 3), scaler_type=RC, scaler_value=1,
                         idle_timeout=5)  # fmt: skip
    await door.settle()
    # When three requests arrive at once, then three workers start
    requests = [await held(door, "api") for _ in range(3)]
    assert len(door.backend.started) == 3
    # And the first worker ready takes every held request (the others were not ready)
    first = door.workers("api")[0]
    await door.ready(first)
    assert [await r for r in requests] == [first] * 3 and first.in_flight == 3
    # When the others are ready, new requests go to them
    await ready_workers(door, "api")
    ep = door.plane.endpoint("api")
    assert door.plane.take_route_worker(ep) is door.workers("api")[1]
    # And once every request is answered, idle workers stop after idle_timeout: back to zero
    for _ in range(3):
        door.plane.release_route_worker(ep, first)
    door.plane.release_route_worker(ep, door.workers("api")[1])
    await door.step(5)
    assert door.workers("api") == []


async def test_requests_in_flight_past_the_scaler_value_start_another_worker_at_once() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(0, 3), scaler_type=RC, scaler_value=2)
    request = await held(door, "api")
    await door.ready(door.worker("api"))
    await request
    ep = door.plane.endpoint("api")
    door.plane.take_route_worker(ep)
    await door.settle()
    assert len(door.backend.started) == 1  # 2 in flight: ceil(2 / 2) = 1
    door.plane.take_route_worker(ep)
    await door.settle()  # no tick: the request that passed the bound asked for a reconcile
    assert len(door.backend.started) == 2


async def test_a_route_worker_never_ready_is_a_failed_start_with_its_back_off_and_explanation() -> None:
    door = await open_door(route_ready_timeout_s=30.0)
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.settle()
    worker = door.worker("api")
    door.clock.advance(30)
    await door.ready(worker, 204)
    assert door.backend.stopped == [worker.id]
    ep = door.plane.endpoint("api")
    assert ep.start_failures == 1
    (reason,) = door.plane.explain_endpoint("api").reasons
    assert reason.code.value == "start_backoff" and "was not ready within 30s" in reason.detail
    assert "still answered 204" in reason.detail
    assert door.workers("api") == [] and door.backend.workers[worker.id].stops == [0.0]  # killed, devices back
    await door.step(1)  # the back-off (0.5 s) passed: another worker
    assert len(door.backend.started) == 2


async def test_held_requests_given_up_after_workers_never_ready_hear_why() -> None:
    door = await open_door(route_ready_timeout_s=30.0)
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200)
    request = await held(door, "api")
    for _ in range(MAX_START_ATTEMPTS):
        await until(lambda: len(door.backend.running) == 1, "a worker to start")
        door.clock.advance(30)
        await door.ready(door.worker("api"), None)  # nothing ever listened on its port
        if not request.done():
            await door.step(30)  # past the back-off
    explanation = await request
    assert isinstance(explanation, Explanation)
    (reason,) = explanation.reasons
    assert reason.code.value == "start_backoff" and "nothing answered on its port" in reason.detail


async def test_route_workers_that_exit_before_they_are_ready_fail_their_held_requests_after_the_limit() -> None:
    # Given a request held for an endpoint whose workers cannot start (say, their port was taken: they exit 1)
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200)
    request = await held(door, "api")
    for attempt in range(MAX_START_ATTEMPTS):
        await until(lambda: len(door.backend.running) == 1, "a worker to start")
        door.backend.line(door.backend.running[0], "stderr", "OSError: [Errno 98] address already in use")
        await door.crash(door.backend.running and door.worker("api"), 1)
        if attempt < MAX_START_ATTEMPTS - 1:
            assert not request.done()
            await door.step(30)  # past the back-off
    # Then the request is answered at once, with no worker, and the explanation says why
    explanation = await request
    assert isinstance(explanation, Explanation) and "address already in use" in str(explanation)
    assert door.plane.endpoint("api").queued == 0


async def test_an_idle_route_worker_yields_its_device_but_not_one_serving_a_request() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    request = await held(door, "api")
    route_worker = door.worker("api")
    await door.ready(route_worker)
    await request
    door.endpoint(name="jobs", gpu=GpuType.NVIDIA_H200)
    door.submit("jobs")
    await door.step(0)
    assert door.backend.stopped == [] and door.reasons("jobs") == {"busy"}  # a request in flight: it keeps it
    door.plane.release_route_worker(door.plane.endpoint("api"), route_worker)
    await door.step(0)
    assert door.backend.stopped == [route_worker.id]  # idle: it yields at once
    await door.step(0)
    assert len(door.workers("jobs")) == 1


async def test_a_route_endpoint_that_can_never_run_says_so_and_takes_no_jobs() -> None:
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_B200)
    explanation = door.plane.explain_endpoint("api")
    assert explanation.never and "can never run" in explanation.summary
    with pytest.raises(BadInputError) as refused:
        door.submit("api")
    assert refused.value.code == "not_a_queue_endpoint" and "METHOD /api/<path>" in str(refused.value)


async def test_routes_declared_later_update_the_endpoint_but_other_options_are_refused() -> None:
    door = await open_door()
    spec = door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200)
    more = dataclasses.replace(spec, routes=(*ROUTES, RouteSpec("GET", "/more", "more")))
    door.plane.register(more, WorkerTarget(import_path="x:api"))
    assert door.plane.endpoint("api").spec.routes == more.routes
    with pytest.raises(InvalidEndpointError):
        door.plane.register(dataclasses.replace(more, workers_max=3), WorkerTarget(import_path="x:api"))
    row = door.plane.endpoint_rows("api")[0]
    assert row["kind"] == "routes" and row["routes"][-1] == {"method": "GET", "path": "/more"}


async def test_queue_workers_are_never_polled() -> None:
    asked: list[str] = []
    secrets: list[str] = []

    async def probe(address: str, timeout_s: float, secret: str) -> int | None:
        asked.append(address)
        secrets.append(secret)
        return 200

    # a secret in the plane's own environment (or an endpoint's env) reaches no worker: each route worker gets its own
    door = await open_door(probe=probe, worker_env={"FLASHPOINT_ROUTE_SECRET": "inherited"})
    door.endpoint(name="jobs", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step(1)
    assert asked == [] and door.worker("jobs").address is None
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.settle()
    await until(lambda: door.worker("api").state is WorkerState.IDLE, "the route worker to be ready")
    assert asked == [door.worker("api").address]  # one answer of 200 was enough
    # asked with the route secret the worker got, and no queue worker got one
    worker = door.worker("api")
    expected = route_credential(door.plane.worker_credential("api", worker.id), "api", worker.id)
    assert secrets == [expected] == [door.backend.launch(worker.id).env["FLASHPOINT_ROUTE_SECRET"]]
    assert "FLASHPOINT_ROUTE_SECRET" not in door.backend.launch(door.worker("jobs").id).env


async def test_a_route_worker_lost_with_requests_in_flight_leaves_the_counts_exact() -> None:
    door = await open_door()
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    (worker,) = await ready_workers(door, "api")
    ep = door.plane.endpoint("api")
    assert door.plane.take_route_worker(ep) is worker
    await door.crash(worker, -signal.SIGKILL)  # the proxy answers 502; the plane learns it from the exit
    assert door.workers("api") == [] or door.worker("api") is not worker
    door.plane.release_route_worker(ep, worker)  # the proxy's request ends
    assert ep.in_flight == 0


async def test_closing_the_plane_answers_every_held_request() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="hog", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200)
    request = await held(door, "api")
    await door.plane.close()
    assert isinstance(await request, Explanation)


async def test_a_retiring_route_worker_stops_once_its_last_request_is_answered() -> None:
    door = await open_door()
    spec = door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    (worker,) = await ready_workers(door, "api")
    ep = door.plane.endpoint("api")
    door.plane.take_route_worker(ep)
    door.plane.take_route_worker(ep)
    assert door.plane.redeclare(spec, WorkerTarget(import_path="x:api")) == 1  # new code: the worker retires
    assert door.plane.take_route_worker(ep) is None  # it takes nothing new
    door.plane.release_route_worker(ep, worker)
    assert door.backend.stopped == []  # one request still in flight
    door.plane.release_route_worker(ep, worker)
    await door.settle()
    assert door.backend.stopped == [worker.id]
