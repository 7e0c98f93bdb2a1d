"""Who holds this machine's devices, read from the lease directory: every user's flashpoint processes, named by the
kernel (``scheduler/leases.py``), not only the planes this user's announcements list. ``flashpoint gpus`` and
``flashpoint explain`` use it when no plane of this user is announced (root's CLI, say, while another user's server
holds every GPU), so they never call a held device free.

Edge module: may import anything in flashpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flashpoint.explain import OtherProcess
from flashpoint.fleet.inventory import Device
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity, lease_dir

__all__ = ["held_devices", "holders_note", "mark_rows"]


def held_devices(devices: Sequence[Device]) -> dict[tuple[str, int], OtherProcess]:
    """The devices of ``devices`` that another process holds (``Device.key`` -> its holder), as a plane of this user
    would see them: another user's process, a lock file this user cannot trust, or an untrusted lease directory.
    Reads only: makes no lease directory and takes no lease."""
    names = {device.key: identity(device) for device in devices}
    wanted = [name for name in names.values() if name is not None]
    if not wanted:
        return {}
    found = DeviceLeases(Owner.this_process("cli", ""), lease_dir()).holders(wanted)
    held: dict[tuple[str, int], OtherProcess] = {}
    for key, name in names.items():
        holder = found.get(name) if name is not None else None
        if holder is not None:
            held[key] = holder
    return held


def mark_rows(
    rows: Sequence[dict[str, Any]], devices: Sequence[Device], held: Mapping[tuple[str, int], OtherProcess]
) -> None:
    """Name each held device's holder in its row (``rows[i]`` shows ``devices[i]``), as ``GET /v1/fleet`` does for a
    device another process holds: ``process`` (its fields), ``endpoint`` (its label), ``worker`` (its worker)."""
    for row, device in zip(rows, devices, strict=True):
        holder = held.get(device.key)
        if holder is not None:
            row.update({"process": holder.to_json(), "endpoint": holder.label, "worker": holder.worker})


def holders_note(devices: Sequence[Device], held: Mapping[tuple[str, int], OtherProcess]) -> str:
    """One line naming the holders of ``held`` devices (empty when none is held)."""
    if not held:
        return ""
    parts = [f"device {d.index} ({d.model_name}) of {d.node}: {held[d.key].label}" for d in devices if d.key in held]
    return f"held on this machine (lease directory {lease_dir()}): " + "; ".join(parts)
