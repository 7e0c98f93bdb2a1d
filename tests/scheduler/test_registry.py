"""The endpoint registry alone (``EndpointRegistry``), on a bare plane state through the test door: a name declared
again keeps its options (a route endpoint's routes may grow), redeclaring retires the old workers (an idle one stops
now), and an endpoint that can never run on the fleet is judged again when the fleet moves."""

from __future__ import annotations

import dataclasses

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.errors import InvalidEndpointError
from flashpoint.fleet.inventory import Fleet
from flashpoint.scheduler.records import Worker, WorkerState
from flashpoint.scheduler.registry import EndpointRegistry
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import RouteSpec
from tests.scheduler.door import ROUTE_TARGET, ROUTES, TARGET, add_worker, plane_state


class Registry:
    def __init__(self, fleet: str = "node-a=NVIDIA_H200:2") -> None:
        self.state: PlaneState = plane_state(fleet)
        self.code_files: dict[str, str] = {}
        self.stopped: list[str] = []
        self.kicks = 0
        self.registry = EndpointRegistry(
            self.state,
            code_files=self.code_files,
            envs=None,
            fleet_summary=lambda spec: "the fleet",
            stop_worker=self._stop,
            kick=self._kick,
        )

    def _stop(self, worker: Worker) -> None:
        self.stopped.append(worker.id)

    def _kick(self) -> None:
        self.kicks += 1


def test_a_name_declared_again_keeps_its_options_and_more_functions_join_its_target() -> None:
    r = Registry()
    spec = Endpoint(name="e", gpu=GpuType.NVIDIA_H200).spec
    r.registry.register(spec, TARGET)
    assert r.state.endpoints["e"].spec == spec and r.kicks == 1 and r.state.routed == {}
    joined = dataclasses.replace(TARGET, import_path="tests.apps.handlers_app:other")
    r.registry.register(spec, joined, code_file="/tmp/e.pickle")
    assert r.state.endpoints["e"].target == joined and r.code_files == {"e": "/tmp/e.pickle"}
    with pytest.raises(InvalidEndpointError, match="already registered with other options"):
        r.registry.register(Endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=3).spec, TARGET)


def test_a_route_endpoints_routes_may_grow() -> None:
    r = Registry()
    spec = dataclasses.replace(Endpoint(name="api", gpu=GpuType.NVIDIA_H200).spec, kind="routes", routes=ROUTES)
    r.registry.register(spec, ROUTE_TARGET)
    more = dataclasses.replace(spec, routes=(*ROUTES, RouteSpec("GET", "/more", "more")))
    r.registry.register(more, ROUTE_TARGET)
    assert r.state.routed["api"].spec.routes == more.routes


def test_redeclaring_retires_every_worker_stops_the_idle_ones_and_forgets_the_back_off() -> None:
    r = Registry()
    spec = Endpoint(name="e", gpu=GpuType.NVIDIA_H200).spec
    r.registry.register(spec, TARGET, code_file="/tmp/old.pickle")
    ep = r.state.endpoints["e"]
    idle, busy = add_worker(r.state, ep, WorkerState.IDLE), add_worker(r.state, ep, WorkerState.RUNNING)
    busy.jobs = busy.jobs | {"a-job"}
    ep.start_failures, ep.next_start_at = 3, 99.0
    assert r.registry.redeclare(spec, TARGET) == 2
    assert idle.retiring and busy.retiring and r.stopped == [idle.id]  # the busy one stops after its job
    assert (ep.start_failures, ep.next_start_at) == (0, 0.0) and r.code_files == {}


def test_an_endpoint_the_fleet_cannot_hold_is_judged_again_when_the_fleet_moves() -> None:
    r = Registry("node-a=NVIDIA_H200:1")
    r.registry.register(Endpoint(name="pair", gpu=GpuType.NVIDIA_H200, gpu_count=2).spec, TARGET)
    ep = r.state.endpoints["pair"]
    assert ep.never is not None
    second = plane_state("node-a=NVIDIA_H200:2").index.devices
    r.state.index.replace(second, r.state.index.nodes.nodes)
    r.registry.judge_again()
    assert ep.never is None


def test_what_only_a_departed_node_could_hold_waits_for_it_instead_of_never_running() -> None:
    r = Registry("node-a=NVIDIA_H200:1;node-b=NVIDIA_B200:1")
    r.registry.register(Endpoint(name="b", gpu=GpuType.NVIDIA_B200).spec, TARGET)
    remaining = tuple(d for d in r.state.index.devices if d.node == "node-a")
    nodes = tuple(n for n in r.state.index.nodes.nodes if n.name == "node-a")
    fleet = Fleet.of(remaining, nodes)
    r.registry.remember_departed(fleet, r.state.clock.time())
    r.state.index.replace(fleet.devices, fleet.nodes)
    r.registry.judge_again()
    assert set(r.registry.departed) == {"node-b"} and r.state.endpoints["b"].never is None
    assert [reason.code.value for reason in r.registry.away["b"].values()] == ["node_away"]
