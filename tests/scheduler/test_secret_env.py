"""Secrets reach workers (scheduler/loop.py, scheduler/supervision.py): the plane expands an endpoint's ``env`` at
each worker launch through the resolver it was given, refuses at registration an endpoint naming a secret it has no
value for, and shows the value nowhere but in that launch's environment (views, job records, logs)."""

from __future__ import annotations

import dataclasses
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
from flashpoint.scheduler.launcher import AppSecrets
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import MissingSecretsError
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
    resolver: AppSecrets | None = None if secrets is None else (lambda app: secrets.get)
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


def deployed(app: str, **env: Any) -> Any:
    """An endpoint as a deploy of ``app`` registers it (``app.prod.llm``)."""
    return dataclasses.replace(spec(**env), app=app, app_env="prod")


async def test_each_endpoint_is_checked_and_launched_with_its_apps_secrets() -> None:
    # the plane asks its secrets for the endpoint's app (decision 0103); which value an app gets is the store's rule
    kept: dict[str | None, dict[str, str]] = {None: {"tok": "server"}, "shop": {"tok": VALUE}}
    asked: list[str | None] = []

    def secrets(app: str | None) -> Any:
        asked.append(app)
        return kept.get(app, {}).get

    described = parse_fleet("node-a=NVIDIA_H200:2", host=DOOR_HOST)
    backend = StubBackend(described.devices, nodes=described.node_facts)
    plane = ControlPlane(
        MemoryJobStore(), backend, worker_secret="door", clock=FakeClock(), probe=backend.probe, secrets=secrets
    )
    await plane.start(ticking=False)
    p = Plane(plane, backend, {})
    try:
        p.plane.register(deployed("shop", T=Secret("tok"), U="Bearer {{ RUNPOD_SECRET_tok }}"), TARGET)
        [worker_id] = await started(p)
        env = backend.launch(worker_id).env
        assert (env["T"], env["U"], env["FLASHPOINT_APP"]) == (VALUE, f"Bearer {VALUE}", "shop")
        assert "shop" in asked and None not in asked

        # another app: its own resolver, which has no such secret; refused naming it and the command for that app
        for verb in (p.plane.register, p.plane.redeclare):
            with pytest.raises(MissingSecretsError) as caught:
                verb(deployed("lab", T=Secret("tok")), TARGET)
            assert caught.value.names == ("tok",)
            assert "`flashpoint secret set NAME --app lab`" in str(caught.value)
        with pytest.raises(MissingSecretsError, match="--app lab"):
            await p.plane.roll_out(deployed("lab", T=Secret("tok")), TARGET, timeout_s=5)
        assert "lab.prod.llm" not in p.plane.endpoints

        # an endpoint of no app asks for None: the server-wide secrets
        asked.clear()
        p.plane.register(spec(T=Secret("tok")), TARGET)
        started_now = [w for w in await started(p) if w != worker_id]
        assert [backend.launch(w).env["T"] for w in started_now] == ["server"]
        assert None in asked and "lab" not in asked
    finally:
        await plane.close()
