"""What a worker process sets up for itself before it loads the endpoint's code: its CPU cores, its volume, and a
hold on the environment it runs in.

Both come from variables the plane sets (``FLASHPOINT_CPU_CORES``, ``FLASHPOINT_VOLUMES``), and both run on the node
the worker runs on, so a Ray worker on another machine does the same as a local one. Called first thing by
flashpoint's worker runtime and by ``flashpoint.worker.launch`` (before it execs a worker command of the user's own),
while the process still has one thread.

- **Cores.** A CPU endpoint's worker is pinned to the cores the plane allotted it (``sched_setaffinity``), keeping
  only cores this machine has (``FLASHPOINT_CPUS`` may declare more than there are).
- **Volume.** ``FLASHPOINT_VOLUMES`` lists the endpoint's volumes (``[{"name", "datacenter", "path"}]``); the worker
  takes the one in its node's datacenter (``FLASHPOINT_NODE_DATACENTER``), else the first, creates its directory,
  and makes it visible at Flash's ``/runpod-volume`` when it can: as root on Linux, in a mount namespace of its own
  (``unshare(CLONE_NEWNS)`` and a bind mount), so each worker sees its own endpoint's volume there and the host's
  mounts are untouched (an empty ``/runpod-volume`` directory is created as the mount point when missing).
  ``FLASHPOINT_VOLUME_PATH`` always names the directory to use: ``/runpod-volume`` when it was mounted, the host
  directory otherwise.

- **Environment.** A worker in a per-endpoint environment takes a shared ``flock`` on its cache's ``<key>.inuse``
  (``FLASHPOINT_ENV_INUSE``) and keeps it for the life of the process, across ``exec`` of a user's command too:
  ``flashpoint venv prune`` leaves the environment alone while any worker runs in it, also one that outlives its
  plane's own hold (a worker retiring after its endpoint was redeclared with other dependencies).

Nothing here raises: a step that cannot be done is logged to stderr and skipped (the worker still runs).

``configure_logging`` is the logging of flashpoint's own worker processes (the runtime and the route server; a user's
command keeps its own): INFO lines on stderr, which reach the plane as the job's log lines, without ``httpx``'s line
per request (the client code in a worker calls other endpoints with, every poll of a wait included).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any

from flashpoint.fleet import volumes
from flashpoint.fleet.volumes import RUNPOD_VOLUME

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


def apply(env: MutableMapping[str, str] | None = None) -> dict[str, Any]:
    """Pin this process to its cores and set up its volume; returns what was done (for tests and logs)."""
    env = os.environ if env is None else env
    done: dict[str, Any] = {}
    cores = pin(env.get("FLASHPOINT_CPU_CORES", ""))
    if cores:
        done["cores"] = cores
    if hold_environment(env.get("FLASHPOINT_ENV_INUSE", "")):
        done["environment"] = env["FLASHPOINT_ENV_INUSE"]
    volume = choose_volume(env.get("FLASHPOINT_VOLUMES", ""), env.get("FLASHPOINT_NODE_DATACENTER", ""))
    if volume is not None:
        path = mount_volume(volume["path"])
        env["FLASHPOINT_VOLUME_PATH"] = path
        done["volume"] = path
    return done


#: the open in-use file of the environment this process runs in, held until the process ends
_environment_hold: int | None = None


def hold_environment(path: str) -> bool:
    """Hold the environment at ``path`` (its ``<key>.inuse``) in use for as long as this process (or the command it
    execs) runs; whether it is held. Never waits: a ``prune`` removing it right now wins, and the worker runs on."""
    global _environment_hold
    if not path or _environment_hold is not None:
        return _environment_hold is not None
    try:
        import fcntl
    except ImportError:  # no flock (Windows): environments are not shared there
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # no O_CREAT: the plane's hold made it
    except OSError as exc:
        _say(f"cannot hold environment {path}: {exc}")
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.set_inheritable(fd, True)  # kept across exec (flashpoint.worker.launch runs a user's command so)
    except OSError as exc:
        os.close(fd)
        _say(f"cannot hold environment {path}: {exc}")
        return False
    _environment_hold = fd
    return True


def configure_logging() -> None:
    """INFO and above on stderr, ``level name: message``; ``httpx`` at WARNING."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)


def pin(text: str) -> tuple[int, ...]:
    """Pin to the listed cores that exist here; ``()`` when none are listed, none exist or the OS has no affinity."""
    if not text.strip() or not hasattr(os, "sched_setaffinity"):
        return ()
    try:
        wanted = {int(part) for part in text.split(",") if part.strip()}
        usable = wanted & os.sched_getaffinity(0)
        if not usable:
            _say(f"cores {sorted(wanted)} are not on this machine; not pinned")
            return ()
        os.sched_setaffinity(0, usable)
    except (ValueError, OSError) as exc:
        _say(f"cannot pin to cores {text!r}: {exc}")
        return ()
    return tuple(sorted(usable))


def choose_volume(text: str, datacenter: str) -> dict[str, str] | None:
    """The volume this worker uses: the one in its node's datacenter, else the first listed; None when none."""
    if not text.strip():
        return None
    try:
        volumes = json.loads(text)
    except ValueError:
        _say(f"FLASHPOINT_VOLUMES is not JSON: {text[:200]!r}")
        return None
    usable = (
        [v for v in volumes if isinstance(v, dict) and isinstance(v.get("path"), str)]
        if isinstance(volumes, list)
        else []
    )
    if not usable:
        return None
    return next((v for v in usable if datacenter and v.get("datacenter") == datacenter), usable[0])


def mount_volume(path: str) -> str:
    """Create the volume's directory and bind it at ``/runpod-volume`` in a mount namespace of this process's own
    when that is possible; returns the path the worker should use."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        _say(f"cannot create volume directory {path}: {exc}")
        return path
    if not volumes.can_mount():
        return path
    try:
        os.makedirs(RUNPOD_VOLUME, exist_ok=True)
        libc = ctypes.CDLL(None, use_errno=True)
        _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        # our own copy of the mounts must not propagate back to the host's
        _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
        _check(libc.mount(os.fsencode(path), os.fsencode(RUNPOD_VOLUME), None, _MS_BIND, None), "mount --bind")
    except OSError as exc:
        _say(f"volume at {path}; not mounted at {RUNPOD_VOLUME} ({exc})")
        return path
    return RUNPOD_VOLUME


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _say(message: str) -> None:
    print(f"flashpoint worker: {message}", file=sys.stderr, flush=True)
