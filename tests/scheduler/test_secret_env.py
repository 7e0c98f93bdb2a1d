"""Secrets reach workers (scheduler/loop.py, scheduler/supervision.py): the plane expands an endpoint's ``env`` at
each worker launch through the resolver it was given, refuses at registration an endpoint naming a secret it has no
value for, and shows the value nowhere but in that launch's environment (views, job records, logs)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from flashpoint import Endpoint, GpuGroup, Secret
from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import MissingSecretsError, SecretResolver
from flashpoint.store.memory import MemoryJobStore
from tests.scheduler.door import DOOR_HOST, TARGET

VALUE = "hf_Zq9-very-secret-value"


@dataclass
class Plane:
    plane: ControlPlane
    backend: StubBackend
    secrets: dict[str, str]


async def open_plane(secrets: dict[str, str] | None) -> Plane:
    described = parse_fleet("node-a=NVIDIA_H200:2", host=DOOR_HOST)
    backend = StubBackend(described.devices, nodes=described.node_facts)
    resolver: SecretResolver | None = None if secrets is None else secrets.get
    plane = ControlPlane(
        MemoryJobStore(), backend, worker_secret="door", clock=FakeClock(), probe=backend.probe, secrets=resolver
    )
    await plane.start(ticking=False)
    return Plane(plane, backend, secrets if secrets is not None else {})


@pytest_asyncio.fixture
async def with_store() -> AsyncIterator[Plane]:
    opened = await open_plane({"hf": VALUE, "other": "o"})
    yield opened
    await opened.plane.close()


def spec(**env: Any) -> Any:
    return Endpoint(name="llm", gpu=GpuGroup.ANY, workers=(1, 1), env=env).spec


async def started(p: Plane) -> list[str]:
    p.plane.kick()
    await p.plane.settled()
    return p.backend.started


async def test_workers_get_the_values_and_the_spec_keeps_the_references(with_store: Plane) -> None:
    p = with_store
    declared = spec(T=Secret("hf"), U="Bearer {{RUNPOD_SECRET_hf}}", PLAIN="x")
    p.plane.register(declared, TARGET)
    [worker_id] = await started(p)
    env = p.backend.launch(worker_id).env
    assert env["T"] == VALUE and env["U"] == f"Bearer {VALUE}" and env["PLAIN"] == "x"
    assert p.plane.endpoints["llm"].spec.env["T"] == "{{ RUNPOD_SECRET_hf }}"


async def test_a_value_set_since_is_what_the_next_worker_gets(with_store: Plane) -> None:
    p = with_store
    p.plane.register(spec(T=Secret("hf")), TARGET)
    [first] = await started(p)
    p.secrets["hf"] = "rotated"
    p.plane.supervision.stop(p.plane.workers[first])
    await p.plane.settled()
    second = [w for w in await started(p) if w != first]
    assert [p.backend.launch(w).env["T"] for w in second] == ["rotated"]


async def test_the_value_is_in_no_view_record_or_log(with_store: Plane, caplog: pytest.LogCaptureFixture) -> None:
    p = with_store
    caplog.set_level(logging.DEBUG)
    p.plane.register(spec(T=Secret("hf"), U="{{ RUNPOD_SECRET_hf }}"), TARGET)
    job = p.plane.submit("llm", {"input": {"x": 1}})
    await started(p)
    views: list[Any] = [
        p.plane.explain_endpoint("llm").to_json(),
        str(p.plane.explain_endpoint("llm")),
        p.plane.explain_job(job.id).to_json(),
        p.plane.health("llm"),
        p.plane.fleet_view(),
        p.plane.node_view(),
        p.plane.endpoint_rows(),
        [repr(j) for j in p.plane.list_jobs()],
        repr(p.plane.endpoints["llm"].spec),
        [repr(w) for w in p.plane.workers.values()],
    ]
    shown = json.dumps(views, default=repr)
    assert "RUNPOD_SECRET_hf" in shown  # the reference may show: it is the spec's env
    assert VALUE not in shown
    assert VALUE not in caplog.text


async def test_a_missing_secret_fails_registration_naming_each(with_store: Plane) -> None:
    p = with_store
    with pytest.raises(MissingSecretsError) as caught:
        p.plane.register(spec(A=Secret("gone"), B="{{ RUNPOD_SECRET_hf }}{{ RUNPOD_SECRET_lost }}"), TARGET)
    assert caught.value.names == ("gone", "lost")
    assert "flashpoint secret set" in str(caught.value)
    assert "llm" not in p.plane.endpoints
    with pytest.raises(MissingSecretsError):
        p.plane.redeclare(spec(A=Secret("gone")), TARGET)
    assert "llm" not in p.plane.endpoints


async def test_a_plane_without_secrets_refuses_a_reference_and_says_what_to_do() -> None:
    p = await open_plane(None)
    try:
        with pytest.raises(MissingSecretsError, match="keeps no secrets.*flashpoint serve") as caught:
            p.plane.register(spec(T=Secret("hf")), TARGET)
        assert caught.value.names == ("hf",)
        p.plane.register(spec(T="no reference"), TARGET)  # an env without references is fine
        assert "llm" in p.plane.endpoints
    finally:
        await p.plane.close()


async def test_a_secret_deleted_after_registration_fails_the_start_with_its_name(with_store: Plane) -> None:
    p = with_store
    p.plane.register(spec(T=Secret("hf")), TARGET)
    del p.secrets["hf"]
    assert await started(p) == []  # no process started with the reference unexpanded
    ep = p.plane.endpoints["llm"]
    assert ep.start_failures >= 1
    why = json.dumps(p.plane.explain_endpoint("llm").to_json())
    assert "hf" in why and "secret" in why
