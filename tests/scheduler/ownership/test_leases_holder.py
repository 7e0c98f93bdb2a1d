"""A real process that holds device leases (a helper of the lease tests; it holds no tests itself): tests start it,
read its ``held`` line, and end it (stdin closed: it lets go; SIGKILL: the kernel lets go). The simulated devices are
the only fake.

Run as ``python -m tests.scheduler.ownership.test_leases_holder ROOT FLEET ENDPOINT [INDEX ...]``: leases the devices
of the simulated ``FLEET`` (all, or those at ``INDEX``) in ``ROOT`` for a worker of ``ENDPOINT``, prints
``held <pid>``, and holds them until its stdin closes.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from flashpoint.fleet.simulated import parse_fleet
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity

ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str]) -> int:
    root, fleet, endpoint, *chosen = argv
    devices = parse_fleet(fleet).devices
    if chosen:
        devices = tuple(devices[int(i)] for i in chosen)
    leases = DeviceLeases(Owner.this_process("script", "http://127.0.0.1:1"), Path(root))
    for device in devices:
        name = identity(device)
        assert name is not None
        other = leases.acquire(name, device, endpoint, f"{endpoint}-w1")
        if other is not None:
            print(f"busy {other.label}", flush=True)
            return 1
    print(f"held {os.getpid()}", flush=True)
    sys.stdin.read()
    leases.close()
    return 0


def start_holder(root: Path, fleet: str, endpoint: str, *indices: int) -> subprocess.Popen[str]:
    """Start a lease holder and return once it holds its leases (30 s at most)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.scheduler.ownership.test_leases_holder",
            str(root),
            fleet,
            endpoint,
            *map(str, indices),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            if line.startswith("held "):
                return proc
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"the lease holder did not get its leases: {line!r}")
    proc.kill()
    proc.wait(10)
    raise AssertionError("the lease holder did not start within 30 s")


def end_holder(proc: subprocess.Popen[str], *, kill: bool = False) -> None:
    """Let the holder go (it releases its leases and exits), or SIGKILL it; wait until it is gone."""
    if kill:
        proc.kill()
    elif proc.stdin is not None:
        proc.stdin.close()
    proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
