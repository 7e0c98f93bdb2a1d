"""The plane's side of device leases (``scheduler/leases.py``; docs/architecture.md, "One owner per device").

``DeviceLeasing`` is a base of ``WorkerSupervision``: the plane takes a device's lease when it starts a worker there
and gives it back when the worker is gone. A device whose lease another flashpoint process holds is held in the fleet
index for that process (``FleetIndex.hold_foreign``), so placement passes it over and its busy reason names the
process; every ``LEASE_RECHECK_S`` the tick asks again, and a device that process gave up (or that died with it) goes
back to placement at once.

Only the plane's own worker starts take leases, and only for devices that have an ``identity`` (real GPUs of this
machine, simulated devices of a declared fleet); a Ray cluster's devices have none: Ray accounts for them.
"""

from __future__ import annotations

import logging
import sys
from abc import ABC, abstractmethod

from flashpoint.clock import Clock
from flashpoint.scheduler.index import FleetIndex
from flashpoint.scheduler.leases import DeviceLeases, Owner, identity, process_kind
from flashpoint.scheduler.records import Worker

log = logging.getLogger("flashpoint.plane")

#: how often the devices other processes hold are asked about again (seconds of the plane's monotonic clock)
LEASE_RECHECK_S = 0.5


class DeviceLeasing(ABC):
    """Takes and gives back this plane's device leases; keeps the devices other processes hold out of placement."""

    index: FleetIndex
    clock: Clock
    #: this process's leases
    leases: DeviceLeases
    #: when the devices other processes hold are next asked about (monotonic)
    _next_lease_check: float

    @abstractmethod
    def kick(self) -> None: ...

    def _init_leases(self, leases: DeviceLeases | None, *, url: str, server: bool) -> None:
        """Lease with ``leases`` (tests), else in ``lease_dir()`` as this process: a ``server`` (a durable plane) or
        what its command line says (``process_kind``), reachable at ``url``."""
        self.leases = leases or DeviceLeases(Owner.this_process(process_kind(sys.argv, server), url))
        self._next_lease_check = 0.0

    def _take_leases(self, worker: Worker) -> bool:
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
            self.index.hold_foreign(device, other)
            self.kick()
            return False
        return True

    def _release_leases(self, worker: Worker) -> None:
        """The worker is gone: its devices' leases go back."""
        for device in worker.devices:
            name = identity(device)
            if name is not None:
                self.leases.release(name)

    def _recheck_leases(self, now: float) -> None:
        """Every ``LEASE_RECHECK_S``, ask who holds the devices other processes held: one given up (or whose holder
        died) goes back to placement; one held by yet another holder is named anew."""
        foreign = self.index.foreign()
        if not foreign or now < self._next_lease_check:
            return
        self._next_lease_check = now + LEASE_RECHECK_S
        freed = False
        for device, held_by in foreign:
            name = identity(device)
            holder = self.leases.holder(name) if name is not None else None
            if holder == held_by:
                continue
            self.index.release((device,))
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
                self.index.hold_foreign(device, holder)
        if freed:
            self.kick()

    def _close_leases(self) -> None:
        """The plane closed: every lease it still holds goes back."""
        self.leases.close()
