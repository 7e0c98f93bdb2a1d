"""Sharing a fleet through the test door (DESIGN §11): priority classes, low-priority jobs, idle yield by class,
preemption and its grace period, fair share between apps, and the node choice (pack, spread, first)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.errors import InvalidEndpointError
from flashpoint.jobs import JobStatus, Reason
from flashpoint.scheduler.records import WorkerState
from flashpoint.spec import EndpointSpec
from tests.scheduler.door import TARGET, Door, open_door

H200, A100 = GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe


def register(door: Door, name: str, app: str | None = None, **options: Any) -> EndpointSpec:
    """An endpoint of ``app`` (env production) or of no app, with ``Endpoint``'s options."""
    spec = Endpoint(name=name, **options).spec
    if app is not None:
        spec = dataclasses.replace(spec, app=app, app_env="production")
    door.plane.register(spec, TARGET)
    return spec


@pytest.mark.parametrize(
    ("classes", "winner"),
    [
        # (class of "one", class of "two") -> who gets the only device; "one" is always the older waiter
        (("normal", "normal"), "one"),
        (("low", "normal"), "two"),
        (("normal", "high"), "two"),
        (("high", "low"), "one"),
        (("low", "low"), "one"),
    ],
)
async def test_class_then_age_decides_who_gets_a_scarce_device(classes: tuple[str, str], winner: str) -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    register(door, "one", gpu=H200, priority=classes[0])
    register(door, "two", gpu=H200, priority=classes[1])
    door.plane.submit("one", {})
    door.clock.advance(1)
    door.plane.submit("two", {})
    await door.step()
    assert [w.endpoint for w in door.plane.workers.values()] == [winner]


async def test_a_server_defined_class_ranks_where_it_says_and_an_unknown_one_is_refused() -> None:
    door = await open_door("node-a=NVIDIA_H200:1", priority_classes={"high": 2, "normal": 1, "low": 0, "urgent": 9})
    register(door, "chat", gpu=H200, priority="high")
    register(door, "pager", gpu=H200, priority="urgent")
    door.submit("chat")
    door.clock.advance(1)
    door.submit("pager")
    await door.step()
    assert [w.endpoint for w in door.plane.workers.values()] == ["pager"]
    with pytest.raises(InvalidEndpointError, match="priority class 'hgih'.*urgent, high, normal, low"):
        register(door, "typo", gpu=H200, priority="hgih")


async def test_low_priority_jobs_run_after_the_queues_other_jobs() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    register(door, "e", gpu=H200)
    low = [door.plane.submit("e", {"n": i}, {"flashpoint": {"low_priority": True}}) for i in range(2)]
    normal = [door.plane.submit("e", {"n": i}) for i in range(2)]
    assert all(job.low_priority for job in low) and not any(job.low_priority for job in normal)
    assert door.plane.endpoint("e").queued == 4
    await door.step()
    worker = door.worker("e")
    taken = [*(await door.pull(worker, 3)), *(await door.pull(worker, 3))]
    assert taken == [normal[0].id, normal[1].id, low[0].id, low[1].id]


@pytest.mark.parametrize(
    ("other", "winner"),
    [
        # chat (high) has only a low-priority job queued, the older one: it waits as the lowest class
        ("low", "chat"),  # both low: the older goes first
        ("normal", "other"),  # a normal waiter goes first
    ],
)
async def test_an_endpoint_with_only_low_priority_jobs_waits_as_the_lowest_class(other: str, winner: str) -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    register(door, "chat", gpu=H200, priority="high")
    register(door, "other", gpu=H200, priority=other)
    door.plane.submit("chat", {}, {"flashpoint": {"low_priority": True}})
    door.clock.advance(1)
    door.submit("other")
    await door.step()
    assert [w.endpoint for w in door.plane.workers.values()] == [winner]


async def test_a_lower_class_idle_worker_yields_before_an_equal_class_one() -> None:
    door = await open_door("node-a=NVIDIA_H200:1;node-b=NVIDIA_H200:1")
    register(door, "normal-idle", gpu=H200)
    register(door, "low-idle", gpu=H200, priority="low")
    for name in ("normal-idle", "low-idle"):
        door.submit(name)
    await door.step()
    for name in ("normal-idle", "low-idle"):
        worker = door.worker(name)
        (job,) = await door.pull(worker)
        await door.finish(worker, job)
    assert all(w.state is WorkerState.IDLE for w in door.plane.workers.values())
    register(door, "waiter", gpu=H200)
    door.submit("waiter")
    await door.step()
    assert [w.state for w in door.workers("low-idle")] in ([WorkerState.STOPPING], [])
    assert door.worker("normal-idle").state is WorkerState.IDLE


async def preempting_door(grace: float = 30.0) -> tuple[Door, str]:
    """A door with one H200: a preemptible low-class endpoint runs a job on it, then a high-class job arrives."""
    door = await open_door("node-a=NVIDIA_H200:1", exit_on_stop=False, preempt_grace_s=grace)
    register(door, "train", gpu=H200, priority="low", preemptible=True)
    register(door, "chat", gpu=H200, priority="high")
    job = door.submit("train")
    await door.step()
    worker = door.worker("train")
    assert await door.pull(worker) == [job.id]
    door.submit("chat")
    await door.step()
    return door, job.id


async def test_a_preemptible_worker_is_told_to_stop_and_its_job_returns_to_its_queue_after_the_grace() -> None:
    door, job_id = await preempting_door(grace=30.0)
    (victim,) = door.workers("train")
    assert victim.state is WorkerState.STOPPING and victim.preempted_for == "chat"
    assert door.backend.workers[victim.id].stops == [30.0]  # told to stop, with the grace period to do it
    assert door.plane.job(job_id).status is JobStatus.IN_PROGRESS  # during the grace the job runs on
    assert "preempted" in door.reasons("chat")
    await door.step(10)
    assert door.workers("chat") == []  # the device is still the victim's
    assert door.backend.stopped == [victim.id]  # and nobody else was preempted meanwhile
    await door.crash(victim, -15)  # it exits (or is killed at the end of the grace)
    await door.step()
    job = door.plane.job(job_id)
    assert job.status is JobStatus.IN_QUEUE and job.reason is Reason.PREEMPTED
    assert job.retries == 0  # not a retry
    (attempt,) = job.attempts
    assert attempt["outcome"] == "preempted" and attempt["workerId"] == victim.id
    assert attempt["placement"]["gpuModel"] == "NVIDIA H200"
    assert [w.endpoint for w in door.plane.workers.values()] == ["chat"]
    assert door.plane.job(job_id).view().to_native()["attempts"] == [attempt]


async def test_a_result_inside_the_grace_ends_the_job_normally() -> None:
    door, job_id = await preempting_door()
    (victim,) = door.workers("train")
    await door.finish(victim, job_id, "done in time")
    assert door.plane.job(job_id).status is JobStatus.COMPLETED  # it finished within its grace: no requeue
    assert door.plane.job(job_id).attempts == []


async def test_a_preempted_job_completes_later() -> None:
    door, job_id = await preempting_door()
    (victim,) = door.workers("train")
    await door.crash(victim, -9)
    await door.step()
    chat = door.worker("chat")
    (chat_job,) = await door.pull(chat)
    await door.finish(chat, chat_job)
    door.plane.supervision.stop(chat)  # chat is done: the device comes back to train
    await door.crash(chat, -15)
    await door.step()
    train = door.worker("train")
    assert await door.pull(train) == [job_id]
    await door.finish(train, job_id, "trained")
    job = door.plane.job(job_id)
    assert job.status is JobStatus.COMPLETED and job.output == "trained" and len(job.attempts) == 1
    assert job.reason is Reason.COMPLETED


@pytest.mark.parametrize(
    ("train", "chat", "preempted"),
    [
        ({"priority": "low", "preemptible": True}, {"priority": "high"}, True),
        ({"priority": "low", "preemptible": False}, {"priority": "high"}, False),  # not preemptible
        ({"priority": "normal", "preemptible": True}, {"priority": "normal"}, False),  # same class
        ({"priority": "high", "preemptible": True}, {"priority": "normal"}, False),  # a higher class
        ({"priority": "low", "preemptible": True}, {"priority": "normal"}, True),
    ],
)
async def test_only_a_higher_class_preempts_and_only_preemptible_workers(
    train: dict[str, Any], chat: dict[str, Any], preempted: bool
) -> None:
    door = await open_door("node-a=NVIDIA_H200:1", exit_on_stop=False)
    register(door, "train", gpu=H200, **train)
    register(door, "chat", gpu=H200, **chat)
    door.submit("train")
    await door.step()
    await door.pull(door.worker("train"))
    door.submit("chat")
    await door.step()
    assert (door.worker("train").state is WorkerState.STOPPING) is preempted


async def test_a_low_priority_job_of_a_high_endpoint_preempts_nothing() -> None:
    door = await open_door("node-a=NVIDIA_H200:1", exit_on_stop=False)
    register(door, "train", gpu=H200, priority="normal", preemptible=True)
    register(door, "chat", gpu=H200, priority="high")
    door.submit("train")
    await door.step()
    await door.pull(door.worker("train"))
    door.plane.submit("chat", {}, {"flashpoint": {"low_priority": True}})
    await door.step()
    assert door.worker("train").state is WorkerState.RUNNING


async def test_preemption_keeps_the_declared_order_and_is_a_last_resort() -> None:
    # chat asks A100 first, then H200. The A100 is held by a preemptible low worker; the H200 is free: the free
    # H200 is taken (preemption only when nothing fits), and nobody is preempted
    door = await open_door("node-a=NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:1", exit_on_stop=False)
    register(door, "train", gpu=A100, priority="low", preemptible=True)
    register(door, "chat", gpu=[A100, H200], priority="high", workers=2)
    door.submit("train")
    await door.step()
    await door.pull(door.worker("train"))
    door.submit("chat")
    await door.step()
    assert door.worker("train").state is WorkerState.RUNNING
    (first,) = door.workers("chat")
    assert first.devices[0].model_name == "NVIDIA H200"
    # a second chat worker: nothing fits any more; the A100 (its first choice) is taken from train
    await door.pull(first)
    door.submit("chat")
    door.clock.advance(10)  # QUEUE_DELAY adds a worker after 4 s of waiting
    await door.step()
    assert door.worker("train").state is WorkerState.STOPPING
    await door.crash(door.worker("train"), -15)
    await door.step()
    assert [w.devices[0].model_name for w in door.workers("chat")] == ["NVIDIA H200", "NVIDIA A100 80GB PCIe"]


@pytest.mark.parametrize(
    ("placement", "override", "node"),
    [
        ("pack", None, "node-b"),  # best fit: b has exactly the one free device
        ("spread", None, "node-a"),  # the most free
        ("pack", "first", "node-a"),  # the plane's override: the first node in fleet order
        ("pack", "spread", "node-a"),
        ("spread", "pack", "node-b"),
    ],
)
async def test_the_node_a_worker_goes_to_follows_the_policy(placement: str, override: str | None, node: str) -> None:
    door = await open_door("node-a=NVIDIA_H200:4;node-b=NVIDIA_H200:1", placement_policy=override)
    register(door, "e", gpu=H200, placement=placement)
    door.submit("e")
    await door.step()
    assert door.worker("e").node == node


@pytest.mark.parametrize(("policy", "big_workers"), [("pack", 2), ("first", 1), ("spread", 0)])
async def test_packing_keeps_whole_nodes_for_eight_gpu_requests(policy: str, big_workers: int) -> None:
    door = await open_door(
        "node-a=NVIDIA_H200:8;node-b=NVIDIA_H200:8;node-c=NVIDIA_H200:2;node-d=NVIDIA_H200:1", placement_policy=policy
    )
    one_each = {"scaler_type": "REQUEST_COUNT", "scaler_value": 1}
    register(door, "small", gpu=H200, workers=3, **one_each)
    register(door, "big", gpu=H200, gpu_count=8, workers=2, **one_each)
    for _ in range(3):
        door.submit("small")
    await door.step()
    # pack fills d then c (the fewest free first); first fills a; spread puts one on a, one on b, one more on a
    expected = {
        "pack": ["node-d", "node-c", "node-c"],
        "first": ["node-a"] * 3,
        "spread": ["node-a", "node-b", "node-a"],
    }
    assert [w.node for w in door.workers("small")] == expected[policy]
    for _ in range(2):
        door.submit("big")
    await door.step()
    assert len(door.workers("big")) == big_workers


async def test_fair_share_gives_a_freed_device_to_the_app_furthest_below_its_share() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    one_each = {"scaler_type": "REQUEST_COUNT", "scaler_value": 1}
    register(door, "a-work", app="alpha", gpu=H200, workers=4, **one_each)
    register(door, "b-work", app="beta", gpu=H200, workers=4, **one_each)
    for _ in range(3):
        door.submit("a-work")
    await door.step()
    door.submit("b-work")
    await door.step()
    assert len(door.workers("a-work")) == 3 and len(door.workers("b-work")) == 1
    for worker in [*door.workers("a-work"), *door.workers("b-work")]:
        assert len(await door.pull(worker)) == 1
    door.submit("a-work")  # alpha's waiter is the older
    door.clock.advance(1)
    door.submit("b-work")
    await door.step()
    assert "busy" in door.reasons("a-work") and "busy" in door.reasons("b-work")
    # one device frees (an alpha worker ends): it goes to beta, below its share (1 of 4 against alpha's 2)
    ending = door.workers("a-work")[0]
    await door.finish(ending, next(iter(ending.jobs)))
    door.plane.supervision.stop(ending)
    await door.step()
    assert len(door.workers("b-work")) == 2 and len(door.workers("a-work")) == 2


async def test_fair_share_weights_set_the_share() -> None:
    door = await open_door("node-a=NVIDIA_H200:4", app_weights={"alpha": 3.0})
    register(door, "a-work", app="alpha", gpu=H200, workers=4, scaler_type="REQUEST_COUNT", scaler_value=1)
    register(door, "b-work", app="beta", gpu=H200, workers=4, scaler_type="REQUEST_COUNT", scaler_value=1)
    for _ in range(4):
        door.submit("a-work")
        door.submit("b-work")
    await door.step()
    # weights 3:1 over 4 devices: alpha 3, beta 1 (turns by devices held over weight)
    assert (len(door.workers("a-work")), len(door.workers("b-work"))) == (3, 1)


async def test_fair_share_shares_converge_and_no_app_waits_forever() -> None:
    """Three apps with a steady stream of one-device jobs on a 6-device fleet; weights 1:1:1. Over time each app's
    share of the completed work converges to a third, and every queued job of every app is eventually run."""
    door = await open_door("node-a=NVIDIA_H200:6")
    apps = ("alpha", "beta", "gamma")
    for app in apps:
        register(door, f"{app}-work", app=app, gpu=H200, workers=6, scaler_type="REQUEST_COUNT", scaler_value=1)
    # alpha floods first: 40 jobs, then beta and gamma 20 each
    for _ in range(40):
        door.submit("alpha-work")
    door.clock.advance(1)
    for _ in range(20):
        door.submit("beta-work")
        door.submit("gamma-work")
    done = dict.fromkeys(apps, 0)
    held_over_time: list[dict[str, int]] = []
    for _ in range(200):
        await door.step(1)
        # every worker runs one job for one step, then stops (so devices free and go round)
        for worker in list(door.plane.workers.values()):
            if worker.state is WorkerState.STOPPING:
                continue
            if worker.jobs:
                job_id = next(iter(worker.jobs))
                await door.finish(worker, job_id)
                done[door.plane.endpoint(worker.endpoint).spec.app or ""] += 1
                door.plane.supervision.stop(worker)
            else:
                await door.pull(worker)
        held = {app: len(door.workers(f"{app}-work")) for app in apps}
        held_over_time.append(held)
        if sum(done.values()) == 80:
            break
    assert done == {"alpha": 40, "beta": 20, "gamma": 20}  # nobody waits forever
    # while all three had work queued, the devices were shared evenly (2 each, give or take a worker)
    contested = held_over_time[3:12]
    assert contested and all(max(h.values()) - min(h.values()) <= 1 for h in contested), contested


@pytest.mark.parametrize(
    ("extra", "low"),
    [
        ({"policy": {"lowPriority": True}}, True),  # Runpod's policy (rc2's with_options on the embedded plane)
        ({"policy": {"lowPriority": False}}, False),
        ({"policy": {"lowPriority": "yes"}}, False),  # only a true boolean (the HTTP intake refuses anything else)
        ({"flashpoint": {"low_priority": True}}, True),  # flashpoint's own (the SDK's low_priority())
        ({}, False),
    ],
)
async def test_a_job_is_low_priority_by_its_policy_or_flashpoints_metadata(extra: dict[str, Any], low: bool) -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    register(door, "e", gpu=H200)
    job = door.plane.submit("e", {}, extra)
    assert job.low_priority is low
    assert (door.plane.endpoint("e").queued_low, len(door.plane.endpoint("e").low_queue)) == (int(low), int(low))


async def test_the_free_devices_beside_a_preempted_worker_wait_for_the_preemptor() -> None:
    # node-a: train's worker holds 2 of 4 H200; big (4 GPUs, normal) preempts it. The other 2 are free, and side (low,
    # 2 GPUs) waits too: they are kept for big, in this plan and while train's worker stops, or side would take them and
    # be preempted in turn, for ever
    door = await open_door("node-a=NVIDIA_H200:4", exit_on_stop=False)
    register(door, "train", gpu=H200, gpu_count=2, priority="low", preemptible=True)
    door.submit("train")
    await door.step()
    await door.pull(door.worker("train"))
    register(door, "big", gpu=H200, gpu_count=4)
    register(door, "side", gpu=H200, gpu_count=2, priority="low", preemptible=True)
    door.submit("big")
    door.submit("side")
    await door.step()
    assert door.worker("train").state is WorkerState.STOPPING
    assert door.workers("side") == []  # the two free H200 are big's
    await door.step(5)  # the victim is still stopping: still big's
    assert door.workers("side") == [] and door.workers("big") == []
    assert "preempted" in door.reasons("big")
    await door.crash(door.worker("train"), -15)
    await door.step()
    assert [w.node for w in door.workers("big")] == ["node-a"] and door.workers("side") == []
