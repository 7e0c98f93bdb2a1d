"""One owner per device, through the engine's test door (StubBackend + FakeClock): a device whose lease another
process holds is busy, named with that process, and is placed once freed; the plane's own leases go back when its
worker is gone and when it closes. The other process is real (tests/scheduler/ownership/test_leases_holder.py) or,
where a test needs holders to come and go at its command, a lease book in this process with the lock file's real
lock."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from flashpoint import GpuType
from flashpoint.explain import Code
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.jobs import JobStatus
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity, prepare
from flashpoint.scheduler.records import Worker
from tests.scheduler.door import BASE_URL, DOOR_HOST, Door, open_door
from tests.scheduler.ownership.test_leases_holder import end_holder, start_holder


def names(fleet: str) -> list[str]:
    """The lease names of a simulated fleet's devices, in fleet order."""
    found = [identity(d) for d in parse_fleet(fleet, host=DOOR_HOST).devices]
    assert all(found)
    return [n for n in found if n is not None]


async def door_on(fleet: str, root: Path) -> Door:
    return await open_door(fleet, leases=DeviceLeases(Owner.this_process("script", BASE_URL), root))


def book(root: Path, port: int) -> DeviceLeases:
    """Another holder's lease book: another plane of this process (the kernel names this process as the holder, and
    the record, its own, says the rest), serving at ``port``."""
    return DeviceLeases(Owner.this_process("flashpoint serve", f"http://127.0.0.1:{port}"), root)


async def test_a_device_another_process_holds_is_busy_naming_it_and_placed_once_it_is_freed(tmp_path: Path) -> None:
    # Given another process holding the lease of the fleet's one H200 for its endpoint "infer"
    fleet = "node-a=NVIDIA_H200:1"
    child = start_holder(tmp_path, fleet, "infer")
    try:
        door = await door_on(fleet, tmp_path)
        door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
        # When a job is submitted here
        job = door.submit("mine")
        await door.settle()
        # Then no worker starts, and the job waits busy, naming the other process (pid, endpoint)
        assert door.backend.started == [] and job.status is JobStatus.IN_QUEUE
        (reason,) = door.plane.explain_job(job.id).reasons
        assert reason.code is Code.BUSY and reason.holders == ()
        (other,) = reason.processes
        assert (other.pid, other.endpoint, other.worker, other.kind) == (child.pid, "infer", "infer-w1", "script")
        assert f"pid {child.pid}" in reason.detail and "endpoint infer" in reason.detail
        (row,) = door.plane.fleet_view()
        assert row["process"]["pid"] == child.pid and row["worker"] == "infer-w1"
        # And it stays so while the other process holds it
        await door.step(1.0)
        assert door.backend.started == []
    finally:
        # When the other process lets the device go
        end_holder(child)
    await door.step(0.5)
    # Then a worker starts on it, and the lease is now this plane's, naming its worker
    worker = door.worker("mine")
    assert [d.index for d in worker.devices] == [0]
    held_by = book(tmp_path, 1).holder(names(fleet)[0])
    assert held_by is not None and held_by.same_process and (held_by.endpoint, held_by.worker) == ("mine", worker.id)
    assert door.plane.fleet_view()[0].get("process") is None


async def test_a_worker_goes_to_a_device_no_other_process_holds(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:2"
    child = start_holder(tmp_path, fleet, "infer", 0)
    try:
        door = await door_on(fleet, tmp_path)
        door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
        door.submit("mine")
        await door.settle()
        # the first device in fleet order is the other process's: the worker gets the second
        assert [d.index for d in door.worker("mine").devices] == [1]
        assert door.reasons("mine") == {"worker_starting"}
    finally:
        end_holder(child)


async def test_a_process_killed_with_sigkill_frees_its_devices_at_the_next_recheck(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:1"
    child = start_holder(tmp_path, fleet, "infer")
    door = await door_on(fleet, tmp_path)
    door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    door.submit("mine")
    await door.settle()
    assert door.reasons("mine") == {"busy"}
    end_holder(child, kill=True)
    await door.step(0.5)
    assert len(door.workers("mine")) == 1


async def test_leases_go_back_when_the_worker_is_gone_and_when_the_plane_closes(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:1"
    (name,) = names(fleet)
    door = await door_on(fleet, tmp_path)
    door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    door.submit("mine")
    await door.settle()
    other = book(tmp_path, 4242)
    assert other.holder(name) is not None and door.plane.leasing.leases.held() == (name,)
    # a worker that dies gives its device's lease back at once
    await door.crash(door.worker("mine"))
    assert door.plane.leasing.leases.held() == () and other.holder(name) is None
    # the plane starts another for the queued job; closing the plane gives that lease back too
    await door.step(1.0)
    assert door.plane.leasing.leases.held() == (name,)
    await door.plane.close()
    assert door.plane.leasing.leases.held() == () and other.holder(name) is None


async def test_a_worker_of_two_devices_takes_no_lease_while_one_of_them_is_held_elsewhere(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:2"
    first, second = names(fleet)
    other = book(tmp_path, 4242)
    devices = parse_fleet(fleet, host=DOOR_HOST).devices
    assert other.acquire(second, devices[1], "infer", "infer-w1") is None
    door = await door_on(fleet, tmp_path)
    door.endpoint(name="pair", gpu=GpuType.NVIDIA_H200, gpu_count=2)
    door.submit("pair")
    await door.settle()
    # busy, and the lease of the free device was not kept either
    (reason,) = door.plane.explain_endpoint("pair").reasons
    assert reason.code is Code.BUSY and [(p.pid, p.url) for p in reason.processes] == [
        (os.getpid(), "http://127.0.0.1:4242")
    ]
    assert "1 free on one node at most, need 2" in reason.detail
    assert door.plane.leasing.leases.held() == () and other.holder(first) is None
    other.release(second)
    await door.step(0.5)
    assert [d.index for d in door.worker("pair").devices] == [0, 1]
    assert sorted(door.plane.leasing.leases.held()) == sorted([first, second])


async def test_a_device_that_changes_hands_elsewhere_is_named_anew(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:1"
    (name,) = names(fleet)
    (device,) = parse_fleet(fleet, host=DOOR_HOST).devices
    first, second = book(tmp_path, 1111), book(tmp_path, 2222)
    assert first.acquire(name, device, "a", "a-w1") is None
    door = await door_on(fleet, tmp_path)
    door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    door.submit("mine")
    await door.settle()
    assert [p.endpoint for p in door.plane.explain_endpoint("mine").reasons[0].processes] == ["a"]
    # between two rechecks the first holder lets go and a second takes it: the next recheck names the second
    first.release(name)
    assert second.acquire(name, device, "b", "b-w1") is None
    await door.step(0.5)
    (reason,) = door.plane.explain_endpoint("mine").reasons
    assert [(p.url, p.endpoint) for p in reason.processes] == [("http://127.0.0.1:2222", "b")]
    assert door.backend.started == []
    second.release(name)
    await door.step(0.5)
    assert len(door.workers("mine")) == 1


async def test_a_lease_directory_others_may_write_holds_every_device_until_it_is_fixed(tmp_path: Path) -> None:
    # Given a lease directory every user may write without the sticky bit: any of them could delete a held lock file
    root = tmp_path / "leases"
    root.mkdir()
    os.chmod(root, 0o777)
    fleet = "node-a=NVIDIA_H200:1"
    door = await door_on(fleet, root)
    door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    job = door.submit("mine")
    await door.settle()
    # Then no worker starts on a device it cannot lease safely: the job waits busy, saying why and what to do
    assert door.backend.started == [] and job.status is JobStatus.IN_QUEUE
    (reason,) = door.plane.explain_job(job.id).reasons
    assert reason.code is Code.BUSY and "an untrusted lease directory" in reason.detail
    assert "without the sticky bit" in reason.detail and "FLASHPOINT_LEASE_DIR" in reason.detail
    (row,) = door.plane.fleet_view()
    assert row["process"]["kind"] == "lease directory"
    await door.step(1.0)
    assert door.backend.started == []
    assert not (root / "wants").exists()  # no want mark for a directory: there is nobody to ask
    # When the directory is made sticky, the next recheck places the worker
    os.chmod(root, 0o1777)
    await door.step(0.5)
    assert len(door.workers("mine")) == 1 and door.plane.leasing.leases.held() == tuple(names(fleet))


async def test_two_planes_of_one_process_never_share_a_device(tmp_path: Path) -> None:
    # Given two planes in this process on the same simulated fleet, leasing in one directory
    fleet = "node-a=NVIDIA_H200:1"
    first, second = await door_on(fleet, tmp_path), await door_on(fleet, tmp_path)
    first.endpoint(name="a", gpu=GpuType.NVIDIA_H200)
    second.endpoint(name="b", gpu=GpuType.NVIDIA_H200)
    first.submit("a")
    await first.settle()
    second.submit("b")
    await second.settle()
    # Then the second waits for the first's worker, naming the first plane
    assert len(first.workers("a")) == 1 and second.workers("b") == []
    (reason,) = second.plane.explain_endpoint("b").reasons
    (other,) = reason.processes
    assert other.same_process and other.pid == os.getpid() and other.endpoint == "a"
    assert "another control plane of this process" in reason.detail
    # And once the first plane closes, the second places its worker
    await first.plane.close()
    await second.step(0.5)
    assert len(second.workers("b")) == 1


async def idle_holder(door: Door, **options: Any) -> Worker:
    """An endpoint "a" of ``door`` whose one worker ran a job and is now idle on the fleet's H200."""
    door.endpoint(name="a", gpu=GpuType.NVIDIA_H200, idle_timeout=600, **options)
    job = door.submit("a")
    await door.settle()
    worker = door.worker("a")
    await door.pull(worker)
    await door.finish(worker, job.id)
    return worker


async def test_an_idle_worker_yields_its_device_at_once_to_another_process_waiting_for_it(tmp_path: Path) -> None:
    # Given the first plane's idle worker on the one H200 (idle_timeout 600 s, above its minimum of 0)
    fleet = "node-a=NVIDIA_H200:1"
    (name,) = names(fleet)
    first, second = await door_on(fleet, tmp_path), await door_on(fleet, tmp_path)
    idle = await idle_holder(first)
    # When the second plane gets a job for an H200
    second.endpoint(name="b", gpu=GpuType.NVIDIA_H200)
    second.submit("b")
    await second.settle()
    assert second.workers("b") == [] and second.reasons("b") == {"busy"}
    # Then at its next lease recheck it marks the device for "b"
    await second.step(0.5)
    assert second.plane.leasing.wants.marked() == (name,)
    # and at the first plane's next recheck the idle worker yields it, not after its idle_timeout
    await first.step(0.5)
    assert first.backend.stopped == [idle.id] and first.plane.leasing.leases.held() == ()
    assert first.plane.leasing.wanted_elsewhere == {}  # the device is no longer this plane's: nobody waits for it here
    # and the second plane places its worker there at its next recheck, and withdraws its mark
    await second.step(0.5)
    assert [w.devices for w in second.workers("b")] == [idle.devices]
    assert second.plane.leasing.wants.marked() == () and second.plane.leasing.leases.held() == (name,)


async def test_a_worker_at_its_minimum_or_busy_does_not_yield_to_another_process(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:2"
    first, second = await door_on(fleet, tmp_path), await door_on(fleet, tmp_path)
    # Given the first plane's two H200s: one held by a worker at its endpoint's minimum, one by a busy worker
    first.endpoint(name="warm", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    first.endpoint(name="busy", gpu=GpuType.NVIDIA_H200)
    first.submit("busy")
    await first.settle()
    await first.pull(first.worker("busy"))
    await first.pull(first.worker("warm"), count=0)
    # When the second plane waits for an H200 and marks both
    second.endpoint(name="b", gpu=GpuType.NVIDIA_H200)
    second.submit("b")
    await second.settle()
    await second.step(0.5)
    assert len(second.plane.leasing.wants.marked()) == 2
    # Then the first plane hears of it, and stops neither
    await first.step(0.5)
    assert len(first.plane.leasing.wanted_elsewhere) == 2
    assert first.backend.stopped == [] and len(first.plane.leasing.leases.held()) == 2
    await second.step(0.5)
    assert second.workers("b") == []


async def test_a_plane_that_stops_waiting_withdraws_its_marks(tmp_path: Path) -> None:
    fleet = "node-a=NVIDIA_H200:1"
    first, second = await door_on(fleet, tmp_path), await door_on(fleet, tmp_path)
    first.endpoint(name="busy", gpu=GpuType.NVIDIA_H200)
    first.submit("busy")
    await first.settle()
    await first.pull(first.worker("busy"))
    second.endpoint(name="b", gpu=GpuType.NVIDIA_H200)
    job = second.submit("b")
    await second.settle()
    await second.step(0.5)
    assert len(second.plane.leasing.wants.marked()) == 1
    second.plane.cancel(job.id)  # nothing waits any more
    # marks follow the reasons of the last reconcile, which the tick runs after the recheck: withdrawn one recheck on
    await second.step(0.5)
    await second.step(0.5)
    assert second.plane.leasing.wants.marked() == () and list((tmp_path / "wants").glob("*.want-*")) == []
    await first.step(0.5)
    assert first.plane.leasing.wanted_elsewhere == {}


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="a file of user nobody needs root")
async def test_a_lock_file_another_user_deletes_under_a_running_worker_is_leased_again_at_the_next_recheck(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a worker placed through a lock file user nobody made (a good one: 0666)
    fleet = "node-a=NVIDIA_H200:1"
    (name,) = names(fleet)
    root = tmp_path / "leases"
    prepare(root, shared=True)  # sticky and world-writable, as the shared default
    lock = root / f"{name}.lock"
    lock.write_text("")
    os.chmod(lock, 0o666)
    os.chown(lock, 65534, 65534)
    door = await door_on(fleet, root)
    door.endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    door.submit("mine")
    await door.settle()
    assert len(door.workers("mine")) == 1 and door.plane.leasing.leases.held() == (name,)
    # When its owner deletes it (and so could another process lock a new file of that name)
    lock.unlink()
    with caplog.at_level(logging.WARNING, "flashpoint.plane"):
        await door.step(0.5)
    # Then the plane's recheck leased it again through a new file, and said so; the next process finds it held
    assert "was deleted or replaced while this process held its lease; leased again" in caplog.text
    assert lock.stat().st_uid == os.getuid()
    held_by = book(root, 1).acquire(name, parse_fleet(fleet, host=DOOR_HOST).devices[0], "b", "b-w1")
    assert held_by is not None and held_by.endpoint == "mine"
