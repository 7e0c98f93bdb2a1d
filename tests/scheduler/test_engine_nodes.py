"""Node rules through the test door (StubBackend + FakeClock): CPU workers reserve their instance's vCPUs and memory
(never oversubscribed: the rest wait ``cpu_busy``), ordered CPU fallback, idle yield between CPU endpoints, release
when a worker is gone, never-fits at registration, ``datacenter=`` matching (and its note on an unlabelled fleet),
the CUDA floor per node, what the worker is told, and the nodes the fleet view shows."""

from __future__ import annotations

import logging

import httpx
import pytest

from flashpoint import GpuType
from flashpoint.api.native import create_native_app
from flashpoint.fleet.inventory import Node
from flashpoint.scheduler.records import WorkerState
from tests.scheduler.door import open_door

GB = 1024
EU = {"datacenter": "EU-RO-1"}
US = {"datacenter": "US-KS-2"}


def cpu_node(name: str, cpus: int = 2, memory_gb: int = 4, **facts: object) -> Node:
    return Node(name, cpus=cpus, memory_mb=memory_gb * GB, **facts)  # type: ignore[arg-type]


# --- CPU capacity ----------------------------------------------------------------------------------------------------


async def test_cpu_workers_wait_cpu_busy_instead_of_oversubscribing_the_node() -> None:
    # Given one CPU-only node of 2 vCPUs and 4 GB, and two endpoints whose workers take all of it
    door = await open_door("", nodes=[cpu_node("box")])
    door.endpoint(name="one", cpu="cpu3c-2-4")
    door.endpoint(name="two", cpu="cpu3c-2-4")

    # When both have a job queued
    door.submit("one")
    door.submit("two")
    await door.settle()

    # Then one worker runs, on the node's two cores, and the other endpoint waits with the CPU reason
    (first,) = door.backend.started
    assert door.workers("one")[0].id == first and door.workers("two") == []
    assert door.workers("one")[0].cpu is not None and door.workers("one")[0].cpu.cores == (0, 1)
    assert door.reasons("two") == {"cpu_busy"}
    (reason,) = door.plane.explain_endpoint("two").reasons
    assert reason.holders == ("one",)
    assert reason.detail == (
        "cpu3c-2-4 needs 2 vCPUs and 4 GB; the most free on one node is 0 vCPUs and 0 GB; held by one"
    )
    door.plane.index.verify()


async def test_a_cpu_job_records_its_instance_type_and_cores() -> None:
    # Given a node of 4 vCPUs where a cpu3c-2-4 worker of "one" already holds cores 0 and 1
    door = await open_door("", nodes=[cpu_node("box", cpus=4, memory_gb=8)])
    door.endpoint(name="one", cpu="cpu3c-2-4", workers=(1, 1))
    door.endpoint(name="two", cpu=["cpu5c-8-16", "cpu3c-2-4"])
    await door.settle()

    # When "two" (whose first instance type never fits) runs a job
    job = door.submit("two")
    await door.settle()
    worker = door.worker("two")
    (taken,) = await door.pull(worker)
    await door.finish(worker, taken)

    # Then the job says where it ran: the node, the instance type its fallback chose, the cores
    placement = door.plane.job(job.id).placement
    assert placement is not None
    assert (placement.node, placement.gpu_model, placement.device_ids) == ("box", None, ())
    assert (placement.cpu_instance, placement.cores) == ("cpu3c-2-4", (2, 3))
    assert placement.to_json()["cpuInstance"] == "cpu3c-2-4" and placement.to_json()["cores"] == [2, 3]


async def test_release_on_worker_exit_lets_the_waiting_endpoint_start() -> None:
    # Given "warm", whose minimum of one worker holds the node's CPUs (at its minimum, it does not yield)
    door = await open_door("", nodes=[cpu_node("box")])
    door.endpoint(name="warm", cpu="cpu3c-2-4", workers=(1, 1))
    door.endpoint(name="two", cpu="cpu3c-2-4")
    await door.settle()
    warm = door.worker("warm")
    await door.pull(warm)
    door.submit("two")
    await door.settle()
    assert door.reasons("two") == {"cpu_busy"}

    # When the warm worker dies
    await door.crash(warm)

    # Then its CPUs are back, and the endpoint with a job queued gets them; "warm" now waits for its minimum
    assert door.worker("two").cpu is not None and door.worker("two").cpu.cores == (0, 1)
    assert door.workers("warm") == []
    assert door.reasons("warm") == {"cpu_busy"}
    door.plane.index.verify()


async def test_two_small_workers_share_a_node_and_a_third_waits() -> None:
    door = await open_door("", nodes=[cpu_node("box")])
    door.endpoint(name="small", cpu="cpu3c-1-2", workers=(0, 3), scaler_type="REQUEST_COUNT", scaler_value=1)
    for _ in range(3):
        door.submit("small")
    await door.settle()

    assert [w.cpu.cores for w in door.workers("small") if w.cpu] == [(0,), (1,)]
    assert door.reasons("small") == {"cpu_busy"}
    assert door.plane.index.nodes.free("box") == (0, 0)


async def test_cpu_fallback_keeps_the_declared_order() -> None:
    # Given a small node and a large one: the first instance fits only on the large one; the second fits both
    door = await open_door("", nodes=[cpu_node("small", 2, 4), cpu_node("large", 8, 16)])
    door.endpoint(name="ordered", cpu=["cpu3c-8-16", "cpu3c-2-4"], workers=(0, 3))
    door.endpoint(name="other", cpu="cpu3c-2-4")
    door.submit("ordered")
    await door.settle()

    # Then the first worker takes the large node as cpu3c-8-16 (declared order beats fleet order)
    worker = door.worker("ordered")
    assert worker.node == "large" and worker.cpu is not None and len(worker.cpu.cores) == 8

    # And with the large node full, a second worker falls back to cpu3c-2-4 on the small node
    await door.pull(worker)
    door.submit("ordered")
    await door.step(4)  # QUEUE_DELAY: the oldest queued job has waited scaler_value seconds
    second = door.workers("ordered")[1]
    assert (second.node, second.cpu.memory_mb if second.cpu else 0) == ("small", 4 * GB)


async def test_idle_cpu_workers_yield_to_a_waiting_cpu_endpoint() -> None:
    door = await open_door("", nodes=[cpu_node("box")])
    door.endpoint(name="early", cpu="cpu3c-2-4", idle_timeout=600)
    door.endpoint(name="late", cpu="cpu3c-2-4")
    job = door.submit("early")
    await door.settle()
    early = door.worker("early")
    await door.pull(early)
    await door.finish(early, job.id)  # idle now, above its minimum of 0

    door.submit("late")
    await door.settle()

    # Then the idle worker is stopped at once (not after its idle timeout) and "late" gets the CPUs
    assert door.backend.stopped == [early.id]
    assert door.workers("early") == []
    assert door.worker("late").cpu is not None
    door.plane.index.verify()


async def test_gpu_workers_reserve_no_cpus() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    door.endpoint(name="gpu", gpu=GpuType.NVIDIA_H200, gpu_count=2)
    door.endpoint(name="cpu", cpu="cpu3c-4-8")
    door.submit("gpu")
    door.submit("cpu")
    await door.settle()

    assert door.worker("gpu").cpu is None
    cpu = door.worker("cpu")
    assert cpu.node == "node-a" and cpu.cpu is not None and cpu.cpu.cores == (0, 1, 2, 3)  # all 4 of the door's vCPUs


async def test_an_instance_larger_than_every_node_is_reported_at_registration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    door = await open_door("", nodes=[cpu_node("box")])
    with caplog.at_level(logging.WARNING, logger="flashpoint.plane"):
        door.endpoint(name="big", cpu="cpu5c-8-16")
    door.submit("big")
    await door.settle()

    assert door.backend.started == []
    explanation = door.plane.explain_endpoint("big")
    assert explanation.never
    assert explanation.summary == "can never run on this fleet: no node has the vCPUs and memory of its CPU instance"
    (reason,) = explanation.reasons
    assert reason.code.value == "cpu_too_large"
    assert "cpu5c-8-16 needs 8 vCPUs and 16 GB; the largest node has 2 vCPUs and 4 GB" in reason.detail
    assert "FLASHPOINT_CPUS=8 and FLASHPOINT_MEMORY_GB=16" in reason.detail
    assert "box: 2 vCPUs, 4 GB" in explanation.fleet  # a CPU endpoint's explanation shows the nodes
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "endpoint 'big' asks for cpu=cpu5c-8-16, which no node of this fleet can ever provide" in warning


async def test_a_node_large_enough_joining_makes_it_run() -> None:
    door = await open_door("", nodes=[cpu_node("box")])
    door.endpoint(name="big", cpu="cpu3c-8-16")
    door.submit("big")
    await door.settle()
    assert door.plane.explain_endpoint("big").never

    door.backend.change_fleet([], [cpu_node("box"), cpu_node("huge", 8, 16)])
    await door.settle()

    assert not door.plane.explain_endpoint("big").never
    assert door.worker("big").node == "huge"


async def test_a_cpu_worker_whose_node_leaves_is_lost_and_its_slot_dropped() -> None:
    door = await open_door("", nodes=[cpu_node("a"), cpu_node("b")])
    door.endpoint(name="e", cpu="cpu3c-2-4")
    job = door.submit("e")
    await door.settle()
    worker = door.worker("e")
    assert worker.node == "a"
    await door.pull(worker)

    door.backend.change_fleet([], [cpu_node("b")])
    await door.settle()

    # its job went back to the queue (the retry rule) and a new worker took node b
    assert worker.id in door.backend.stopped
    (replacement,) = door.workers("e")
    assert replacement.node == "b" and job.retries == 1
    door.plane.index.verify()


# --- datacenters -----------------------------------------------------------------------------------------------------


async def test_datacenter_places_only_on_nodes_with_that_label() -> None:
    door = await open_door(
        "us=NVIDIA_H200:1;eu=NVIDIA_H200:1",
        nodes=[cpu_node("us", 4, 8, labels=US, cuda="12.8"), cpu_node("eu", 4, 8, labels=EU, cuda="12.8")],
    )
    door.endpoint(name="gpu", gpu=GpuType.NVIDIA_H200, datacenter="EU-RO-1", workers=(0, 2))
    door.endpoint(name="cpu", cpu="cpu3c-1-2", datacenter="EU-RO-1")
    door.submit("gpu")
    door.submit("cpu")
    await door.settle()

    assert door.worker("gpu").node == "eu"
    assert door.worker("cpu").node == "eu"
    # the worker is told its node's datacenter (the volume code reads it)
    assert door.backend.launch(door.worker("gpu").id).env["FLASHPOINT_NODE_DATACENTER"] == "EU-RO-1"

    # a second GPU worker finds eu's H200 taken and us out of its datacenter
    await door.pull(door.worker("gpu"))
    door.submit("gpu")
    await door.step(4)
    reasons = door.plane.explain_endpoint("gpu").reasons
    assert [(r.candidate, r.code.value) for r in reasons] == [
        ("NVIDIA H200", "busy"),
        ("datacenter=EU-RO-1", "datacenter"),
    ]
    assert reasons[1].detail == "1 node(s) are not in EU-RO-1: US-KS-2 (us)"


async def test_datacenter_that_no_node_is_in_never_fits_and_names_the_fleets_datacenters() -> None:
    door = await open_door("us=NVIDIA_H200:1", nodes=[cpu_node("us", labels=US, cuda="12.8")])
    door.endpoint(name="eu", gpu=GpuType.NVIDIA_H200, datacenter="EU-RO-1")
    door.submit("eu")
    await door.settle()

    explanation = door.plane.explain_endpoint("eu")
    assert explanation.never and door.backend.started == []
    assert explanation.summary == "can never run on this fleet: no node is in its datacenter"
    (reason,) = explanation.reasons
    assert (reason.code.value, reason.detail) == (
        "datacenter",
        "no node is in EU-RO-1; the fleet's nodes are in: US-KS-2 (us)",
    )


async def test_datacenter_on_a_fleet_without_datacenter_labels_is_ignored_and_explain_says_so() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="eu", gpu=GpuType.NVIDIA_H200, datacenter="EU-RO-1")
    door.submit("eu")
    await door.settle()

    assert door.worker("eu").node == "node-a"  # placed as if no datacenter were asked
    explanation = door.plane.explain_endpoint("eu")
    (note,) = explanation.notes
    assert note.startswith("datacenter=EU-RO-1 is not applied: no node of this fleet has a datacenter label")
    assert f"note: {note}" in str(explanation)
    assert explanation.to_json()["notes"] == [note]
    assert door.plane.endpoint_rows("eu")[0]["explanation"]["notes"] == [note]


# --- CUDA floor ------------------------------------------------------------------------------------------------------


async def test_a_node_below_the_cuda_floor_is_no_candidate() -> None:
    door = await open_door(
        "old=NVIDIA_H200:1;new=NVIDIA_H200:1;unknown=NVIDIA_H200:1",
        nodes=[cpu_node("old", cuda="12.4"), cpu_node("new", cuda="12.8"), cpu_node("unknown")],
    )
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, min_cuda_version="12.8", workers=(0, 3))
    door.submit("e")
    await door.settle()
    assert door.worker("e").node == "new"

    await door.pull(door.worker("e"))
    door.submit("e")
    await door.step(4)
    reasons = door.plane.explain_endpoint("e").reasons
    assert [(r.candidate, r.code.value) for r in reasons] == [
        ("NVIDIA H200", "busy"),
        ("min_cuda_version=12.8", "cuda_version"),
    ]
    assert reasons[1].detail.startswith("old has CUDA 12.4 < 12.8; unknown: CUDA version unknown")


async def test_no_node_with_a_new_enough_driver_never_fits() -> None:
    door = await open_door("old=NVIDIA_H200:1", nodes=[cpu_node("old", cuda="12.4")])
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, min_cuda_version="12.8")

    explanation = door.plane.explain_endpoint("e")
    assert explanation.never
    assert (
        explanation.summary == "can never run on this fleet: no node has a CUDA driver as new as its min_cuda_version"
    )
    assert [r.code.value for r in explanation.reasons] == ["cuda_version"]


async def test_the_door_fleet_passes_the_default_cuda_floor() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")  # simulated nodes report CUDA 12.8
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, min_cuda_version="12.8")
    door.submit("e")
    await door.settle()
    assert door.worker("e").state is WorkerState.STARTING


# --- what the worker is told, and what the fleet view shows ----------------------------------------------------------


async def test_the_worker_is_told_its_cores_and_datacenter() -> None:
    door = await open_door("node-a=NVIDIA_H200:1", nodes=[cpu_node("node-a", 4, 8, labels=EU, cuda="12.8")])
    door.endpoint(name="cpu", cpu="cpu3c-2-4")
    door.endpoint(name="gpu", gpu=GpuType.NVIDIA_H200)
    door.submit("cpu")
    door.submit("gpu")
    await door.settle()

    cpu_env = door.backend.launch(door.worker("cpu").id).env
    gpu_env = door.backend.launch(door.worker("gpu").id).env
    assert (cpu_env["FLASHPOINT_CPU_CORES"], cpu_env["FLASHPOINT_NODE_DATACENTER"]) == ("0,1", "EU-RO-1")
    assert (gpu_env["FLASHPOINT_CPU_CORES"], gpu_env["FLASHPOINT_NODE_DATACENTER"]) == ("", "EU-RO-1")
    launch = door.backend.launch(door.worker("cpu").id)
    assert (launch.node, launch.cpus, launch.memory_mb) == ("node-a", 2, 4 * GB)


async def test_the_fleet_view_shows_nodes_and_their_reservations() -> None:
    door = await open_door("gpu-box=NVIDIA_H200:1", nodes=[cpu_node("cpu-box", 4, 8, labels=EU)])
    door.endpoint(name="cpu", cpu="cpu3c-2-4", datacenter="EU-RO-1")
    door.submit("cpu")
    await door.settle()
    worker = door.worker("cpu")

    transport = httpx.ASGITransport(app=create_native_app(door.plane))
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as client:
        body = (await client.get("/fleet")).json()

    assert [n["name"] for n in body["nodes"]] == ["gpu-box", "cpu-box"]
    assert body["nodes"][1] == {
        "name": "cpu-box",
        "cpus": 4,
        "memoryGb": 8.0,
        "cuda": None,
        "labels": EU,
        "simulated": False,
        "freeCpus": 2,
        "freeMemoryGb": 4.0,
        "reservations": [{"worker": worker.id, "endpoint": "cpu", "cores": [0, 1], "memoryGb": 4.0}],
    }
    assert body["nodes"][0]["cuda"] == "12.8" and body["nodes"][0]["simulated"] is True
    assert [d["node"] for d in body["devices"]] == ["gpu-box"]


@pytest.mark.parametrize(
    ("fleet", "gpu", "advice"),
    [
        (
            "a=NVIDIA_H200:2;b=NVIDIA_H200:4",
            "NVIDIA H200",
            "lower gpu_count to 4 (the most NVIDIA H200 devices one node has)",
        ),
        ("a=NVIDIA_H200:2", ["NVIDIA B200", "NVIDIA H200"], "lower gpu_count to 2 (the most NVIDIA H200 devices"),
        ("a=NVIDIA_L40S:3", "any", "lower gpu_count to 3"),
        ("a=NVIDIA_L40S:8", "NVIDIA H200", "add a fallback the fleet has"),  # the model is not here at all
    ],
)
async def test_a_gpu_count_no_node_has_advises_lowering_it(
    fleet: str, gpu: object, advice: str, caplog: pytest.LogCaptureFixture
) -> None:
    door = await open_door(fleet)
    door.endpoint(name="wide", gpu=gpu, gpu_count=6)
    (warning,) = [r.getMessage() for r in caplog.records if "wide" in r.getMessage()]
    assert advice in warning
    assert ("GpuGroup.ANY" in warning) is advice.startswith("add a fallback")
    await door.plane.close()
