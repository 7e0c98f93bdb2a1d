"""A lease book driven over stdin, for tests that run it as another Unix user (tests/hardening/test_other_user.py); it
holds no tests itself. One JSON command per line in, one JSON answer per line out.

Run as ``python -m tests.hardening.leaseuser ROOT FLEET``: the lease book of this process in ``ROOT`` (as a plane
leases: ``DeviceLeases``, ``WantMarks``), on the devices of the simulated ``FLEET``. Commands (``index``: a device of
the fleet):

- ``{"op": "info"}``: ``{"pid", "uid", "ticks"}``
- ``{"op": "acquire", "index", "endpoint"}`` / ``{"op": "holder", "index"}``: ``{"held_by": OtherProcess JSON or null}``
- ``{"op": "mark", "indices", "endpoint"}``: this plane marks those devices; ``{"marked": [...]}``
- ``{"op": "wanters", "indices"}``: the marks others put on those devices: ``{"wanters": [OtherProcess JSON, ...]}``
- ``{"op": "plant", "index", "how", "target"}``: what an attacker leaves in a lock file's place (``0600``, ``0666``:
  a file of that mode; ``symlink``: a link to ``target``); ``{"planted": path}``
- ``{"op": "recheck"}``: look again at held leases through lock files of other users (``recheck_files``): ``{"notes"}``
- ``{"op": "forge", "index", "record"}``: lock the lock file (an exclusive flock, as a holder does) and write
  ``record`` into it as it is; ``{"locked": true}``
- ``{"op": "forge_mark", "index", "pid", "token", "record"}``: a want mark file naming ``pid`` holding ``record``
- ``{"op": "unlink", "path"}``: ``{"error": null or the error}``
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

from flashpoint.fleet.simulated import parse_fleet
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity
from flashpoint.scheduler.ownership.wants import WANTS_DIR, WantMarks


def main(argv: list[str]) -> int:
    root, fleet = Path(argv[0]), argv[1]
    devices = parse_fleet(fleet).devices
    names = [identity(d) or "" for d in devices]
    leases = DeviceLeases(Owner.this_process("script", "http://127.0.0.1:1"), root)
    marks = WantMarks(leases.owner, root / WANTS_DIR)
    forged: list[int] = []  # descriptors of forged locks, held until exit
    for line in sys.stdin:
        command: dict[str, Any] = json.loads(line)
        op = command["op"]
        index = int(command.get("index", 0))
        answer: dict[str, Any]
        if op == "info":
            ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # start time, clock ticks
            answer = {"pid": os.getpid(), "uid": os.getuid(), "ticks": ticks}
        elif op in ("acquire", "holder"):
            if op == "acquire":
                held_by = leases.acquire(names[index], devices[index], command["endpoint"], f"{command['endpoint']}-w1")
            else:
                held_by = leases.holder(names[index])
            answer = {"held_by": held_by.to_json() if held_by else None}
        elif op == "recheck":
            answer = {"notes": leases.recheck_files()}
        elif op == "mark":
            marks.mark({names[i]: (devices[i], command["endpoint"]) for i in command["indices"]})
            answer = {"marked": list(marks.marked())}
        elif op == "wanters":
            found = marks.wanters({names[i] for i in command["indices"]})
            answer = {"wanters": [p.to_json() for p in found.values()]}
        elif op == "plant":
            path = root / f"{names[index]}.lock"
            if command["how"] == "symlink":
                path.symlink_to(command["target"])
            else:  # a file of that mode: 0600 keeps others out, 0666 is a lock file as flashpoint makes one
                mode = int(command["how"], 8)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
                os.chmod(path, mode)
            answer = {"planted": str(path)}
        elif op == "forge":
            fd = os.open(root / f"{names[index]}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            os.fchmod(fd, 0o666)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.pwrite(fd, json.dumps(command["record"]).encode(), 0)
            forged.append(fd)
            answer = {"locked": True}
        elif op == "forge_mark":
            path = root / WANTS_DIR / f"{names[index]}.want-{command['pid']}-{command.get('token', 'forged')}"
            path.write_text(json.dumps(command["record"]))
            answer = {"marked": str(path)}
        elif op == "unlink":
            try:
                os.unlink(command["path"])
                answer = {"error": None}
            except OSError as exc:
                answer = {"error": exc.strerror}
        else:
            answer = {"error": f"unknown op {op!r}"}
        print(json.dumps(answer), flush=True)
    marks.close()
    leases.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
