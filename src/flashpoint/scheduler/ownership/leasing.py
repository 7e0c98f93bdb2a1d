"""The plane's side of device leases (``scheduler/leases.py``; docs/architecture.md, "One owner per device").

``DeviceLeasing`` is a collaborator of ``ControlPlane``, which worker supervision asks: the plane takes a device's
lease when it starts a worker there and gives it back when the worker is gone. A device whose lease another
flashpoint process holds is held in the fleet index for that process (``FleetIndex.hold_foreign``), so placement
passes it over and its busy reason names the process; every ``LEASE_RECHECK_S`` the tick asks again, and a device
that process gave up (or that died with it) goes back to placement at once.

Only the plane's own worker starts take leases, and only for devices that have an ``identity`` (real GPUs of this
machine, simulated devices of a declared fleet); a Ray cluster's devices have none: Ray accounts for them.

At the same recheck the plane marks the devices another process holds that one of its waiting endpoints asks for
(``scheduler/wants.py``), and reads the marks on the devices it holds itself: ``wanted_elsewhere`` goes to the
planner, which stops idle workers above their minimum there, as it does for its own waiting endpoints.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from flashpoint.explain import Code, OtherProcess
from flashpoint.fleet.inventory import Device
from flashpoint.gpus import ANY_GPU, describe
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity, process_kind
from flashpoint.scheduler.ownership.wants import WANTS_DIR, WantMarks
from flashpoint.scheduler.records import Worker
from flashpoint.scheduler.state import PlaneState

log = logging.getLogger("flashpoint.plane")

#: how often the devices other processes hold are asked about again (seconds of the plane's monotonic clock)
LEASE_RECHECK_S = 0.5


class DeviceLeasing:
    """Takes and gives back this plane's device leases; keeps the devices other processes hold out of placement.

    It reads the fleet index and the endpoints' waiting reasons of the plane's ``state``, holds devices in the index
    for other processes, and calls ``kick`` when placement should run again (a device came free, a worker must be
    placed again, someone elsewhere newly waits for a device this plane holds)."""

    def __init__(
        self,
        state: PlaneState,
        leases: DeviceLeases | None,
        *,
        url: str,
        server: bool,
        kick: Callable[[], None],
    ) -> None:
        """Lease with ``leases`` (tests), else in ``lease_dir()`` as this process: a ``server`` (a durable plane) or
        what its command line says (``process_kind``), reachable at ``url``."""
        self._state = state
        self._kick = kick
        #: this process's leases
        self.leases = leases or DeviceLeases(Owner.this_process(process_kind(sys.argv, server), url))
        #: when the devices other processes hold are next asked about (monotonic)
        self._next_check = 0.0
        #: this plane's marks on devices other processes hold, and the reader of theirs on its own
        self.wants = WantMarks(self.leases.owner, self.leases.root / WANTS_DIR)
        #: the devices this plane holds that another process waits for, with that process (``Device.key`` ->)
        self.wanted_elsewhere: dict[tuple[str, int], OtherProcess] = {}

    def take(self, worker: Worker) -> bool:
        """Take the leases of the worker's devices. False (and none taken) when another process holds one: that
        device is held in the index for it from now on, and a reconcile places the worker again."""
        taken: list[str] = []
        for device in worker.devices:
            name = identity(device)
            if name is None:
                continue
            other = self.leases.acquire(name, device, worker.endpoint, worker.id)
            if other is None:
                taken.append(name)
                continue
            for held in taken:
                self.leases.release(held)
            log.info(
                "device %d (%s) of %s is held by %s; placing worker %s again",
                device.index,
                device.model_name,
                device.node,
                other.label,
                worker.id,
            )
            self._state.index.hold_foreign(device, other)
            self._kick()
            return False
        return True

    def release(self, worker: Worker) -> None:
        """The worker is gone: its devices' leases go back (and whoever waited for them elsewhere is no longer this
        plane's business)."""
        for device in worker.devices:
            name = identity(device)
            if name is not None:
                self.leases.release(name)
                self.wanted_elsewhere.pop(device.key, None)

    def recheck(self, now: float) -> None:
        """Every ``LEASE_RECHECK_S``, ask who holds the devices other processes held: one given up (or whose holder
        died) goes back to placement; one held by yet another holder is named anew. Then exchange want marks."""
        if now < self._next_check or (
            not self.leases.held() and not self._state.index.foreign() and not self.wants.marked()
        ):
            return
        self._next_check = now + LEASE_RECHECK_S
        for note in self.leases.recheck_files():  # a lock file its owner (another user) deleted: leased again
            log.warning("device lease: %s", note)
        self._recheck_foreign()
        self._exchange_wants()

    def _recheck_foreign(self) -> None:
        foreign = self._state.index.foreign()
        freed = False
        names = {device.key: identity(device) for device, _ in foreign}
        holders = self.leases.holders([name for name in names.values() if name is not None])
        for device, held_by in foreign:
            name = names[device.key]
            holder = holders[name] if name is not None else None
            if holder == held_by:
                continue
            self._state.index.release((device,))
            if holder is None:
                log.info(
                    "device %d (%s) of %s is free again (%s let it go)",
                    device.index,
                    device.model_name,
                    device.node,
                    held_by.label,
                )
                freed = True
            else:
                self._state.index.hold_foreign(device, holder)
        if freed:
            self._kick()

    def _exchange_wants(self) -> None:
        """Mark the devices other processes hold that a waiting endpoint of this plane asks for; read the marks on
        the devices this plane holds, and plan again when someone newly waits for one."""
        wanted: dict[str, tuple[Device, str]] = {}
        for device, process in self._state.index.foreign():
            if not process.pid:  # a lock file or lease directory this process cannot trust: nobody to ask
                continue
            name = identity(device)
            endpoint = self._waiting_for(device, process)
            if name is not None and endpoint is not None:
                wanted[name] = (device, endpoint)
        self.wants.mark(wanted)
        mine = self.leases.held_devices()
        found = {mine[name].key: process for name, process in self.wants.wanters(mine).items()}
        if found != self.wanted_elsewhere:
            for key in found.keys() - self.wanted_elsewhere.keys():
                log.info("device %d of %s is wanted by %s", key[1], key[0], found[key].label)
            self.wanted_elsewhere = found
            if found:
                self._kick()

    def _waiting_for(self, device: Device, process: OtherProcess) -> str | None:
        """The endpoint of this plane that waits for ``device``, which ``process`` holds: one whose busy reason for
        the device's model (or for any GPU) names that process; None when no endpoint does."""
        anything = describe(ANY_GPU)
        for ep in self._state.endpoints.values():
            for reason in ep.waiting:
                if (
                    reason.code is Code.BUSY
                    and process in reason.processes
                    and reason.candidate in (device.model_name, anything)
                ):
                    return ep.spec.key
        return None

    def close(self) -> None:
        """The plane closed: every lease it still holds goes back, and every mark it made is withdrawn."""
        self.wants.close()
        self.leases.close()
