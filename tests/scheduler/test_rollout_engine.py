"""Rollouts and undeploys through the test door (StubBackend + FakeClock): new workers warm beside the old ones and
take nothing until the switch; queued jobs then run on the new version while running ones finish on the old; a full
fleet drains one old worker at a time; a build failure, a crash loop and a timeout abandon the new version and leave
the old serving; route endpoints switch their requests; one rollout per endpoint; ``unregister``; names resolve."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.environments import Environment
from flashpoint.errors import ConflictError, NotFoundError, RolloutFailed
from flashpoint.explain import Explanation
from flashpoint.jobs import JobStatus, Reason
from flashpoint.scheduler.records import Worker
from flashpoint.scheduler.rollout import Together
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS
from flashpoint.spec import EndpointSpec, WorkerTarget
from tests.conftest import eventually
from tests.scheduler.door import Door, open_door, until

H200 = GpuType.NVIDIA_H200
#: the new version's code
NEW = WorkerTarget(import_path="tests.apps.handlers_app:other")


class Rolling:
    """A rollout in flight (a task), with the stages it reported."""

    def __init__(self, door: Door, spec: EndpointSpec, target: WorkerTarget, timeout_s: float) -> None:
        self.stages: list[tuple[str, str]] = []
        self.task = asyncio.ensure_future(
            door.plane.roll_out(spec, target, timeout_s=timeout_s, on_stage=lambda s, d: self.stages.append((s, d)))
        )

    async def failure(self) -> str:
        with pytest.raises(RolloutFailed) as caught:
            await self.task
        return caught.value.reason


async def roll(door: Door, spec: EndpointSpec, target: WorkerTarget = NEW, timeout_s: float = 120.0) -> Rolling:
    rolling = Rolling(door, spec, target, timeout_s)
    await asyncio.sleep(0)  # roll_out stages it and asks for a reconcile
    await door.settle()
    return rolling


def standby(door: Door, endpoint: str) -> list[Worker]:
    return [w for w in door.workers(endpoint) if w.standby]


async def serving(door: Door, name: str, workers: int = 1, **options: Any) -> tuple[EndpointSpec, list[Worker]]:
    """An endpoint with ``workers`` ready workers of its first version."""
    spec = door.endpoint(name=name, gpu=H200, workers=(workers, workers), **options)
    await door.step()
    for worker in door.workers(name):
        await door.pull(worker, 0)
    return spec, door.workers(name)


async def test_new_workers_warm_beside_the_old_and_take_over_at_the_switch() -> None:
    door = await open_door("node-a=NVIDIA_H200:3")
    spec, (old,) = await serving(door, "embed")
    running = door.submit("embed")
    assert await door.pull(old) == [running.id]
    queued = door.submit("embed")  # the old worker is busy: it waits

    rolling = await roll(door, dataclasses.replace(spec, workers_min=2, workers_max=2))
    (first,) = standby(door, "embed")  # new workers start one at a time
    assert first.generation == 2 and old.generation == 1
    assert door.backend.launch(first.id).argv[-1] == NEW.import_path  # the new version's code
    assert await door.pull(first) == []  # ready, but it takes nothing before the switch
    await door.step()
    (_, second) = standby(door, "embed")  # the first is ready: the next starts
    assert second.generation == 2
    assert queued.status is JobStatus.IN_QUEUE and old.live and not rolling.task.done()
    assert rolling.stages == [("warm", "0/2 ready"), ("warm", "1/2 ready")]

    # the second is ready: the switch, and the job queued goes to the new version's worker asking for one
    assert await door.pull(second) == [queued.id]
    await rolling.task
    assert rolling.stages[-2:] == [("warm", "2/2 ready"), ("switch", "generation 2")]
    ep = door.plane.endpoint("embed")
    assert ep.generation == 2 and ep.target == NEW and ep.spec.workers_min == 2 and ep.staged is None
    assert not first.standby and first.live and old.retiring
    assert old.id not in door.backend.stopped  # its running job finishes on it
    await door.finish(old, running.id)
    assert running.status is JobStatus.COMPLETED and running.worker_id == old.id
    assert old.id in door.backend.stopped
    later = door.submit("embed")
    assert await door.pull(first) == [later.id]  # jobs queued after the switch run on the new version
    assert {w["generation"] for w in door.plane.endpoint_rows("embed")[0]["workers"]} == {2}
    await door.plane.close()


async def test_a_full_fleet_drains_one_old_worker_at_a_time() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec, (busy, idle) = await serving(door, "embed", workers=2)
    running = door.submit("embed")
    assert await door.pull(busy) == [running.id]

    rolling = await roll(door, spec)
    # no free device: the idle old worker retires first, and its devices go to a new one
    assert door.backend.stopped == [idle.id]
    (first,) = standby(door, "embed")
    assert first.devices == idle.devices and busy.live
    await door.step()
    assert door.backend.stopped == [idle.id]  # not another while the new one is still starting
    await door.pull(first, 0)
    await door.step()
    # the new one is ready: the busy one retires next, and finishes its job first
    assert busy.retiring and busy.id not in door.backend.stopped and len(standby(door, "embed")) == 1
    waiting = door.submit("embed")
    await door.step()
    assert waiting.status is JobStatus.IN_QUEUE  # the old version starts no replacement meanwhile
    await door.finish(busy, running.id)
    assert running.status is JobStatus.COMPLETED
    await door.step()
    second = next(w for w in standby(door, "embed") if w is not first)
    assert second.devices == busy.devices
    await door.pull(second, 0)
    await door.step()
    await rolling.task
    got = await door.pull(first) + await door.pull(second)
    assert got == [waiting.id]
    await door.plane.close()


class FailingBuilds:
    """An environment source whose every build fails at once, in its thread, as uv's would."""

    def key(self, requirements: Iterable[str]) -> str:
        return "kbroken"

    def ensure(self, requirements: Iterable[str], **options: Any) -> Environment:
        raise RuntimeError("uv could not install flashpoint-no-such-package==1.0\nerror: No solution found")

    def failure(self, key: str) -> None:
        return None


async def test_a_build_failure_abandons_the_rollout_and_the_old_version_serves_on() -> None:
    door = await open_door(environments=FailingBuilds())
    spec, (old,) = await serving(door, "embed")
    rolling = await roll(door, dataclasses.replace(spec, dependencies=("flashpoint-no-such-package==1.0",)))
    await eventually(lambda: rolling.task.done(), 10, "the build to fail")
    assert await rolling.failure() == "environment build failed: uv could not install flashpoint-no-such-package==1.0"
    assert rolling.stages[0][0] == "build"
    ep = door.plane.endpoint("embed")
    assert ep.staged is None and ep.spec == spec and ep.generation == 1 and ep.environment is None
    assert door.workers("embed") == [old] and old.live
    job = door.submit("embed")
    assert await door.pull(old) == [job.id]
    await door.plane.close()


async def test_a_crash_loop_abandons_the_rollout_without_failing_the_old_versions_jobs() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec, (old,) = await serving(door, "embed")
    running = door.submit("embed")
    assert await door.pull(old) == [running.id]
    queued = door.submit("embed")
    rolling = await roll(door, spec)
    for attempt in range(MAX_START_ATTEMPTS):
        (new,) = standby(door, "embed")
        door.backend.line(new.id, "stderr", f"ImportError: cannot import name 'other' (attempt {attempt + 1})")
        await door.crash(new, 1)
        await door.step(5)  # past the start back-off
    reason = await rolling.failure()
    assert reason.startswith(f"worker exited {MAX_START_ATTEMPTS} times while starting: ")
    assert reason.endswith(f"(attempt {MAX_START_ATTEMPTS})")
    ep = door.plane.endpoint("embed")
    assert ep.staged is None and ep.start_failures == 0 and standby(door, "embed") == []
    assert queued.status is JobStatus.IN_QUEUE and running.status is JobStatus.IN_PROGRESS and old.live
    await door.plane.close()


async def test_a_rollout_not_ready_in_time_is_abandoned_and_its_workers_stop() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec, (old,) = await serving(door, "embed")
    rolling = await roll(door, spec, timeout_s=30)
    (new,) = standby(door, "embed")
    await door.step(29)
    assert not rolling.task.done()
    await door.step(1)
    assert await rolling.failure() == "not ready after 30 s: 0 of 1 workers ready"
    assert new.id in door.backend.stopped and door.workers("embed") == [old] and old.live
    await door.plane.close()


async def test_a_route_endpoint_switches_its_requests_to_the_new_workers() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec = door.routes_endpoint(name="api", gpu=H200, workers=(1, 1))
    await door.step()
    (old,) = door.workers("api")
    await door.ready(old)
    ep = door.plane.endpoint("api")
    assert door.plane.take_route_worker(ep) is old  # a request in flight on the old worker

    rolling = await roll(door, spec, WorkerTarget(import_path="tests.apps.routes_app:other"))
    (new,) = standby(door, "api")
    await door.ready(new)
    assert door.plane.take_route_worker(ep) is old  # ready, but no request before the switch
    await door.step()
    await rolling.task
    assert door.plane.take_route_worker(ep) is new
    assert old.retiring and old.id not in door.backend.stopped  # two requests still in flight on it
    door.plane.release_route_worker(ep, old)
    door.plane.release_route_worker(ep, old)
    await door.settle()
    assert old.id in door.backend.stopped
    await door.plane.close()


async def test_one_rollout_per_endpoint_at_a_time() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec, _ = await serving(door, "embed")
    rolling = await roll(door, spec)
    with pytest.raises(ConflictError, match="a rollout of endpoint 'embed' is still running"):
        await door.plane.roll_out(spec, NEW, timeout_s=10)
    await door.plane.close()
    assert await rolling.failure() == "the control plane is closing"


async def test_a_first_rollout_registers_and_waits_for_its_minimum() -> None:
    door = await open_door()
    spec = Endpoint(name="fresh", gpu=H200, workers=(1, 2)).spec
    rolling = await roll(door, spec, NEW)
    (worker,) = door.workers("fresh")
    assert not rolling.task.done() and not worker.standby
    await door.pull(worker, 0)
    await door.step()
    await rolling.task
    idle = await roll(door, Endpoint(name="idle", gpu=H200).spec, NEW)  # min 0: ready at once
    await idle.task
    assert door.workers("idle") == []
    await door.plane.close()


async def test_a_failed_first_rollout_takes_its_endpoint_away() -> None:
    door = await open_door()
    rolling = await roll(door, Endpoint(name="fresh", gpu=H200, workers=(1, 1)).spec, NEW, timeout_s=5)
    job = door.submit("fresh")
    await door.step(5)
    assert await rolling.failure() == "not ready after 5 s: 0 of 1 workers ready"
    with pytest.raises(NotFoundError):
        door.plane.endpoint("fresh")
    assert job.status is JobStatus.FAILED and job.error is not None and "its first rollout failed" in job.error.message
    await door.plane.close()


async def test_unregister_ends_queued_jobs_lets_running_ones_finish_and_forgets_the_endpoint() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    _, (worker,) = await serving(door, "embed")
    running = door.submit("embed")
    assert await door.pull(worker) == [running.id]
    queued = [door.submit("embed") for _ in range(2)]
    assert door.plane.unregister("embed", reason="embed was undeployed from shop/production by alice") == 2
    for job in queued:
        assert job.status is JobStatus.FAILED and job.reason is Reason.SHUTDOWN
        assert job.error is not None and job.error.message == "embed was undeployed from shop/production by alice"
    with pytest.raises(NotFoundError):
        door.plane.endpoint("embed")
    assert door.plane.endpoint_rows() == [] and worker.retiring and worker.id not in door.backend.stopped
    await door.finish(worker, running.id)  # the running job finishes on its worker, which then stops
    assert running.status is JobStatus.COMPLETED and worker.id in door.backend.stopped
    assert door.plane.workers == {} and door.plane.state.leaving == {}
    door.endpoint(name="embed", gpu=H200)  # the key is free again
    await door.plane.close()


async def test_unregister_answers_held_requests_and_abandons_a_rollout() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="hog", gpu=H200, workers=(1, 1))
    spec = door.routes_endpoint(name="api", gpu=H200)
    await door.step()
    ep = door.plane.endpoint("api")
    request = asyncio.ensure_future(door.plane.hold_route_worker(ep, 30))
    await until(lambda: ep.queued == 1, "the request to be held")
    rolling = await roll(door, dataclasses.replace(spec, workers_min=1, workers_max=1))  # no room for its worker
    assert not rolling.task.done()
    assert door.plane.unregister("api", reason="undeployed") == 0
    assert isinstance(await request, Explanation)
    assert await rolling.failure() == "the endpoint was taken away: undeployed"
    await door.plane.close()


async def test_a_worker_of_a_taken_away_endpoint_that_dies_fails_its_job() -> None:
    door = await open_door()
    _, (worker,) = await serving(door, "embed")
    running = door.submit("embed")
    assert await door.pull(worker) == [running.id]
    door.plane.unregister("embed", reason="undeployed")
    await door.crash(worker)
    assert running.status is JobStatus.FAILED and running.reason is Reason.WORKER_LOST
    await door.plane.close()


async def test_bare_names_resolve_through_every_verb_that_takes_one() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")

    def deployed(app: str, env: str, name: str) -> EndpointSpec:
        spec = dataclasses.replace(Endpoint(name=name, gpu=H200).spec, app=app, app_env=env)
        door.plane.register(spec, NEW)
        return spec

    deployed("shop", "production", "embed")
    deployed("lab", "staging", "embed")
    deployed("shop", "production", "rank")
    job = door.submit("rank")  # unique: its id
    assert job.endpoint == "shop.production.rank"
    assert door.plane.explain_endpoint("rank").endpoint == "shop.production.rank"
    assert door.plane.health("rank")["jobs"]["inQueue"] == 1
    assert door.plane.endpoint_rows("rank")[0]["name"] == "shop.production.rank"
    assert [v.id for v in door.plane.list_jobs("rank")] == [job.id]
    assert door.plane.purge("rank") == 1
    message = "endpoint 'embed' is deployed in several apps: lab.staging.embed, shop.production.embed; call it by id"
    for verb in (door.submit, door.plane.explain_endpoint, door.plane.health, door.plane.purge):
        call: Callable[[str], object] = verb
        with pytest.raises(ConflictError) as caught:
            call("embed")
        assert str(caught.value) == message
    assert door.submit("lab.staging.embed").endpoint == "lab.staging.embed"
    with pytest.raises(NotFoundError, match="no endpoint named 'nope'"):
        door.submit("nope")
    await door.plane.close()


async def test_worker_rows_say_their_generation_and_whether_they_stand_by() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec, _ = await serving(door, "embed")
    rolling = await roll(door, spec)
    rows = {(w["generation"], w["standby"], w["state"]) for w in door.plane.endpoint_rows("embed")[0]["workers"]}
    assert rows == {(1, False, "IDLE"), (2, True, "STARTING")}
    assert door.plane.explain_endpoint("embed").workers["starting"] == 1
    await door.plane.close()
    await rolling.failure()


async def test_the_endpoints_of_one_version_switch_together() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    a_spec, (a_old,) = await serving(door, "a")
    b_spec, (b_old,) = await serving(door, "b")
    together = Together({a_spec.key, b_spec.key})
    a_roll = asyncio.ensure_future(door.plane.roll_out(a_spec, NEW, timeout_s=120, together=together))
    b_roll = asyncio.ensure_future(door.plane.roll_out(b_spec, NEW, timeout_s=120, together=together))
    await asyncio.sleep(0)
    await door.settle()
    # one new worker of the group starts at a time: a's first, b's once a's is ready
    (a_new,) = standby(door, "a")
    assert standby(door, "b") == []

    # a's new worker is ready first: it waits, and a's old version serves on
    assert await door.pull(a_new) == []
    await door.step()
    (b_new,) = standby(door, "b")
    assert not a_roll.done() and a_new.standby and door.plane.endpoint("a").generation == 1
    job = door.submit("a")
    assert await door.pull(a_old) == [job.id]

    # b's is ready: both switch in the same reconcile
    assert await door.pull(b_new) == []
    await door.step()
    assert a_roll.done() and b_roll.done()
    await asyncio.gather(a_roll, b_roll)
    assert door.plane.endpoint("a").generation == door.plane.endpoint("b").generation == 2
    assert not a_new.standby and not b_new.standby and a_old.retiring and b_old.retiring
    await door.plane.close()


async def test_a_group_member_that_fails_leaves_the_others_waiting_for_their_caller() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    a_spec, _ = await serving(door, "a")
    b_spec, _ = await serving(door, "b")
    together = Together({a_spec.key, b_spec.key})
    a_roll = asyncio.ensure_future(door.plane.roll_out(a_spec, NEW, timeout_s=120, together=together))
    b_roll = asyncio.ensure_future(door.plane.roll_out(b_spec, NEW, timeout_s=5, together=together))
    await asyncio.sleep(0)
    await door.settle()
    (a_new,) = standby(door, "a")
    assert await door.pull(a_new) == []
    await door.step(6.0)  # b is not ready in time
    with pytest.raises(RolloutFailed):
        await b_roll
    assert not a_roll.done() and door.plane.endpoint("a").generation == 1  # a never switched alone
    a_roll.cancel()  # its caller (the deploy manager) abandons it
    with pytest.raises(asyncio.CancelledError):
        await a_roll
    await door.step()
    assert door.plane.endpoint("a").staged is None and a_new.id in door.backend.stopped
    await door.plane.close()
