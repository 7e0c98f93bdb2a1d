"""Device leases: one owner per device on a machine (docs/architecture.md, "One owner per device").

A flashpoint process that starts a worker on a device first takes the device's *lease*: an exclusive ``flock`` on
``<lease dir>/<identity>.lock``, held by the plane's process for as long as one of its workers holds the device. The
kernel drops a flock when the process that holds it dies, so a lease is never stale. The holder writes a record
(JSON) into the lock file, saying who it is (pid, start time, kind, command line, URL, endpoint, worker), so another
process can name it; a record whose lock nobody holds is stale and read as nobody.

- ``identity(device)`` (pure) names a device machine-wide: an NVML UUID for a real GPU, the node name, model and
  index for a simulated one (so two processes declaring the same simulated fleet collide, and different fleets do
  not), None for a device that is not this machine's to lease (a Ray node's: Ray accounts for those).
- ``DeviceLeases`` takes, releases and reads leases. It never blocks: a lease another process holds is reported
  with that process (``OtherProcess``), and the caller decides.
- ``lease_dir()``: ``$FLASHPOINT_LEASE_DIR``, else ``/tmp/flashpoint-devices``, shared by every user of the machine
  (mode 1777, lock files 0666), since two users' processes must not share a GPU either.

Lock files are never deleted: deleting one while another process has it open would split the lock in two. Without
``fcntl`` (Windows) there are no leases; a lease directory that cannot be used turns leases off with one warning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashpoint.explain import OtherProcess
from flashpoint.scheduler.inventory import Device

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no leases
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("flashpoint.plane")

#: where lease files live, when set
LEASE_DIR_ENV = "FLASHPOINT_LEASE_DIR"
#: the default: one directory for every user of the machine (a GPU is one machine's, whoever runs on it)
DEFAULT_LEASE_DIR = "/tmp/flashpoint-devices"
#: the most of a record read back (a record is a few hundred bytes)
_MAX_RECORD = 16 * 1024
#: how many times a lease found locked with no readable record is tried again at once (a reader probing it, or a
#: holder between its lock and its record)
_RETRIES = 3
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def lease_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$FLASHPOINT_LEASE_DIR``, else ``/tmp/flashpoint-devices``."""
    value = (os.environ if environ is None else environ).get(LEASE_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else Path(DEFAULT_LEASE_DIR)


def identity(device: Device) -> str | None:
    """The device's name on this machine, safe as a file name; None when it is not this machine's to lease.

    A real GPU found by NVML is its UUID (``GPU-...``, ``MIG-...``): the same GPU whatever ``CUDA_VISIBLE_DEVICES``
    or node name a process sees. A simulated device of a declared fleet (``SIM-...`` uuid) is its node name, model and
    index: two processes declaring the same simulated fleet collide, different ones do not. Devices of a Ray cluster
    (uuid ``NodeID:index``; Ray hands an actor GPU ids of its own choosing) and devices without a uuid have none.
    """
    uuid = device.uuid
    if device.simulated:
        if not uuid.startswith("SIM-"):
            return None
        exact = f"{device.node}\0{device.model_name}\0{device.index}".encode()
        readable = _UNSAFE.sub("_", f"{device.node}-{device.model_name}-{device.index}")[:80]
        return f"sim-{readable}-{hashlib.sha256(exact).hexdigest()[:12]}"
    if uuid.startswith(("GPU-", "MIG-")) and not _UNSAFE.search(uuid):
        return uuid
    return None


# ----------------------------------------------------------------------------------------------------------------
# who this process is


@dataclass(frozen=True, slots=True)
class Owner:
    """This process, as its lease records name it."""

    pid: int
    #: wall time the process started (None where /proc does not say)
    started: float | None
    kind: str
    command: str
    url: str

    @classmethod
    def this_process(cls, kind: str, url: str) -> Owner:
        return cls(os.getpid(), process_started(), kind, command_line(sys.argv), url)


def process_kind(argv: Sequence[str], server: bool) -> str:
    """What the process is: ``flashpoint serve`` / ``flashpoint dev`` when run as that command, else ``flashpoint
    serve`` for a durable plane (``server``, an in-process ``Server``), else ``script``."""
    if len(argv) > 1 and argv[1] in ("serve", "dev"):
        program = Path(argv[0])
        if program.name == "flashpoint" or (program.name == "__main__.py" and program.parent.name == "flashpoint"):
            return f"flashpoint {argv[1]}"
    return "flashpoint serve" if server else "script"


def command_line(argv: Sequence[str], limit: int = 160) -> str:
    """The command line, shortened: the program's own name (``flashpoint`` for ``.../flashpoint/__main__.py``),
    then its arguments, cut at ``limit`` characters."""
    if not argv:
        return ""
    program = Path(argv[0])
    name = program.parent.name if program.name == "__main__.py" else program.name
    text = " ".join([name or "python", *argv[1:]])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def process_started(pid: int | None = None) -> float | None:
    """The wall time process ``pid`` (this one by default) started, from /proc; None where that is not known."""
    try:
        fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime, counted from field 3
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if "btime" in line)
        return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's too). On Windows, where ``os.kill(pid, 0)`` would end the
    process, it is taken to be alive."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


# ----------------------------------------------------------------------------------------------------------------
# records


def record(owner: Owner, device: Device, name: str, endpoint: str, worker: str, now: float) -> dict[str, Any]:
    """What the holder of a lease writes into its lock file."""
    return {
        "version": 1,
        "pid": owner.pid,
        "started": owner.started,
        "uid": os.getuid() if hasattr(os, "getuid") else None,
        "kind": owner.kind,
        "command": owner.command,
        "url": owner.url,
        "endpoint": endpoint,
        "worker": worker,
        "device": {"identity": name, "node": device.node, "index": device.index, "model": device.model_name},
        "since": round(now, 3),
    }


def read_record(data: bytes, *, own_pid: int, own_uid: int | None) -> OtherProcess | None:
    """The holder a lock file's content names; None when it names nobody readable (empty, torn or not JSON)."""
    try:
        found = json.loads(data.decode())
        pid = int(found["pid"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if not isinstance(found, dict) or pid <= 0:
        return None
    uid = found.get("uid")
    return OtherProcess(
        pid=pid,
        kind=str(found.get("kind") or "unknown"),
        command=str(found.get("command") or ""),
        url=str(found.get("url") or ""),
        endpoint=str(found.get("endpoint") or ""),
        worker=str(found.get("worker") or ""),
        user=_user_name(uid) if isinstance(uid, int) and own_uid is not None and uid != own_uid else "",
        same_process=pid == own_pid,
    )


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


#: the holder named when a lease is held but its record cannot be read (yet)
UNREADABLE = OtherProcess(0, "unknown", "its lease record is not written yet or cannot be read")


# ----------------------------------------------------------------------------------------------------------------
# the leases


class DeviceLeases:
    """This process's leases, in ``root`` (``lease_dir()`` by default). Not thread-safe: the plane's loop uses it.

    ``acquire`` takes a lease or names who has it, ``release`` gives one back, ``holder`` says who has one now,
    ``close`` gives every lease back. Every call is a few system calls and never waits for another process.
    """

    def __init__(self, owner: Owner, root: Path | None = None) -> None:
        self.owner = owner
        self.root = root if root is not None else lease_dir()
        #: identity -> the open lock file this process holds it with
        self._held: dict[str, int] = {}
        #: identity -> the device of each lease held
        self._devices: dict[str, Device] = {}
        self._ready = False
        #: why leases are off (the directory cannot be used, no fcntl); "" while they work
        self.off = "" if fcntl is not None else "this platform has no fcntl.flock"
        self._uid = os.getuid() if hasattr(os, "getuid") else None

    def held(self) -> tuple[str, ...]:
        """The identities of the leases this process holds."""
        return tuple(self._held)

    def held_devices(self) -> dict[str, Device]:
        """The devices of the leases this process holds, by identity."""
        return dict(self._devices)

    def acquire(self, name: str, device: Device, endpoint: str, worker: str) -> OtherProcess | None:
        """Take the lease of device ``name`` for ``worker`` of ``endpoint``: None when taken (or leases are off),
        else the process that holds it. Taking a lease this object holds already is a bug.

        Raises:
            ValueError: this object holds the lease already.
        """
        if name in self._held:
            raise ValueError(f"the lease of {name} is held by this plane already")
        if not self._usable():
            return None
        try:
            fd = self._open(name, create=True)
        except OSError as exc:
            self._turn_off(f"cannot open {self.root / (name + '.lock')}: {exc}")
            return None
        try:
            for _ in range(_RETRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = self._read(fd)
                    if holder is not None:
                        os.close(fd)
                        return holder
                    continue
                data = json.dumps(record(self.owner, device, name, endpoint, worker, time.time())).encode()
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
                self._held[name] = fd
                self._devices[name] = device
                return None
        except OSError as exc:  # no locks on this file system (ENOLCK), a full disk: say so, and go on without
            os.close(fd)
            self._turn_off(f"cannot lock {self.root / (name + '.lock')}: {exc}")
            return None
        os.close(fd)
        return UNREADABLE

    def release(self, name: str) -> None:
        """Give the lease of ``name`` back (its record is emptied first); one this object does not hold is ignored."""
        fd = self._held.pop(name, None)
        self._devices.pop(name, None)
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the only descriptor of the lock drops it

    def holder(self, name: str) -> OtherProcess | None:
        """Who holds the lease of ``name`` now: None when nobody does (or this object does, or leases are off)."""
        if name in self._held or not self._usable():
            return None
        try:
            fd = self._open(name, create=False, write=False)
        except FileNotFoundError:
            return None
        except OSError:
            return UNREADABLE
        try:
            for _ in range(_RETRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = self._read(fd)
                    if holder is not None:
                        return holder
                    continue
                return None  # free: the record there, if any, is stale
            return UNREADABLE
        finally:
            os.close(fd)

    def close(self) -> None:
        """Give every lease back."""
        for name in list(self._held):
            self.release(name)

    def __del__(self) -> None:  # a plane never closed (a test's) still gives its leases back when collected
        for fd in getattr(self, "_held", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass

    # ------------------------------------------------------------------------------------------------------------

    def _usable(self) -> bool:
        if self.off:
            return False
        if not self._ready:
            try:
                prepare(self.root, shared=self.root == Path(DEFAULT_LEASE_DIR))
            except OSError as exc:
                self._turn_off(str(exc))
                return False
            self._ready = True
        return True

    def _turn_off(self, why: str) -> None:
        self.off = why
        log.warning(
            "device leases are off (%s): another flashpoint process of this machine may be given the same devices; "
            "set %s to a directory every flashpoint process of this machine can write",
            why,
            LEASE_DIR_ENV,
        )

    def _open(self, name: str, *, create: bool, write: bool = True) -> int:
        """Open the lock file of ``name`` (``write``: read-write; a new one 0666, so every user can lock it), never
        through a link. An existing file is opened without ``O_CREAT``: in a sticky world-writable directory Linux
        refuses ``O_CREAT`` on another user's file (``fs.protected_regular``)."""
        path = str(self.root / f"{name}.lock")
        flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        while True:
            try:
                return os.open(path, flags)
            except FileNotFoundError:
                if not create:
                    raise
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue  # another process made it in between: open it as it is
            try:
                os.fchmod(fd, 0o666)  # past the umask
            except OSError:
                pass
            return fd

    def _read(self, fd: int) -> OtherProcess | None:
        try:
            data = os.pread(fd, _MAX_RECORD, 0)
        except OSError:
            return None
        return read_record(data, own_pid=os.getpid(), own_uid=self._uid)


def prepare(root: Path, *, shared: bool) -> None:
    """Make the lease directory. The shared default is made sticky and world-writable (1777, like /tmp), so every
    user's processes can lock its files and none can remove another's; a directory named by ``FLASHPOINT_LEASE_DIR``
    is made with the usual mode and otherwise used as it is.

    Raises:
        OSError: it cannot be made, or it is not a directory (a link is refused).
    """
    try:
        root.mkdir(parents=True, exist_ok=False, mode=0o1777 if shared else 0o777)
        if shared:
            os.chmod(root, 0o1777)  # past the umask
    except FileExistsError:
        pass
    info = os.lstat(root)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(errno.ENOTDIR, f"{root} is not a directory")
