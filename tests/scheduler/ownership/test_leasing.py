"""Device leasing alone (``DeviceLeasing``), on a bare plane state through the test door: a worker's devices are
leased all or none, a device another holder leases is held in the index for it (and placement asked to run again),
and a recheck gives it back to placement once its holder lets it go. The other holder is another lease book of this
process, with the lock file's real lock (as in test_leases_engine)."""

from __future__ import annotations

from pathlib import Path

from flashpoint.fleet.inventory import Device
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity
from flashpoint.scheduler.ownership.leasing import LEASE_RECHECK_S, DeviceLeasing
from flashpoint.scheduler.records import Worker
from flashpoint.scheduler.state import PlaneState
from tests.scheduler.door import BASE_URL, plane_state


class Leasing:
    def __init__(self, root: Path) -> None:
        self.state: PlaneState = plane_state("node-a=NVIDIA_H200:2")
        self.kicks = 0
        leases = DeviceLeases(Owner.this_process("script", BASE_URL), root)
        self.leasing = DeviceLeasing(self.state, leases, url=BASE_URL, server=False, kick=self._kick)

    def _kick(self) -> None:
        self.kicks += 1

    def worker(self, *devices: Device) -> Worker:
        return Worker("e-w1", "e", devices, started_at=0.0, idle_since=0.0, last_exchange=0.0)


def name_of(device: Device) -> str:
    name = identity(device)
    assert name is not None
    return name


def other_holder(root: Path) -> DeviceLeases:
    return DeviceLeases(Owner.this_process("flashpoint serve", "http://127.0.0.1:4242"), root)


def test_a_worker_takes_its_devices_leases_and_gives_them_back_when_released(tmp_path: Path) -> None:
    lease = Leasing(tmp_path)
    first, second = lease.state.index.devices
    worker = lease.worker(first, second)
    assert lease.leasing.take(worker)
    assert sorted(lease.leasing.leases.held()) == sorted([name_of(first), name_of(second)])
    assert other_holder(tmp_path).holder(name_of(first)) is not None and lease.kicks == 0
    lease.leasing.release(worker)
    assert lease.leasing.leases.held() == () and other_holder(tmp_path).holder(name_of(first)) is None


def test_a_device_held_elsewhere_fails_the_whole_take_and_is_held_in_the_index_for_its_holder(tmp_path: Path) -> None:
    lease = Leasing(tmp_path)
    first, second = lease.state.index.devices
    other = other_holder(tmp_path)
    assert other.acquire(name_of(second), second, "infer", "infer-w1") is None
    assert not lease.leasing.take(lease.worker(first, second))
    assert lease.leasing.leases.held() == ()  # all or none: the first device's lease went back
    ((held, process),) = lease.state.index.foreign()
    assert held.key == second.key and process.endpoint == "infer"
    assert not lease.state.index.is_free(second) and lease.kicks == 1  # placement runs again, without it


def test_a_recheck_gives_a_device_back_to_placement_once_its_holder_lets_it_go(tmp_path: Path) -> None:
    lease = Leasing(tmp_path)
    _, second = lease.state.index.devices
    other = other_holder(tmp_path)
    assert other.acquire(name_of(second), second, "infer", "infer-w1") is None
    assert not lease.leasing.take(lease.worker(second))
    clock = lease.state.clock
    lease.leasing.recheck(clock.monotonic())
    assert lease.state.index.foreign() and lease.kicks == 1  # still held: nothing changes
    other.release(name_of(second))
    lease.leasing.recheck(clock.monotonic())  # asked again only every LEASE_RECHECK_S
    assert lease.state.index.foreign()
    clock.advance(LEASE_RECHECK_S)
    lease.leasing.recheck(clock.monotonic())
    assert lease.state.index.foreign() == [] and lease.state.index.is_free(second) and lease.kicks == 2


def test_closing_gives_every_lease_back(tmp_path: Path) -> None:
    lease = Leasing(tmp_path)
    (first, _) = lease.state.index.devices
    assert lease.leasing.take(lease.worker(first))
    lease.leasing.close()
    assert lease.leasing.leases.held() == () and other_holder(tmp_path).holder(name_of(first)) is None
