"""Device leases: one owner per device on a machine (docs/architecture.md, "One owner per device").

A flashpoint process that starts a worker on a device first takes the device's *lease*: an exclusive ``flock`` on
``<lease dir>/<identity>.lock``, held by the plane's process for as long as one of its workers holds the device. The
kernel drops a flock when the process that holds it dies, so a lease is never stale. Who holds a lease is the kernel's
word (``/proc/locks``: the pid, then its real uid and start time; ``scheduler/kernel.py``); the holder also writes a
record into the lock file (``scheduler/leaserecords.py``) that adds its endpoint, worker, command line and URL when it
is the kernel's holder's own.

- ``identity(device)`` (pure) names a device machine-wide: an NVML UUID for a real GPU, the node name, model and
  index for a simulated one (so two processes declaring the same simulated fleet collide, and different fleets do
  not), None for a device that is not this machine's to lease (a Ray node's: Ray accounts for those).
- ``DeviceLeases`` takes, releases and reads leases. It never blocks: a lease another process holds is reported
  with that process (``OtherProcess``), and the caller decides.
- ``lease_dir()``: ``$FLASHPOINT_LEASE_DIR``, else ``/tmp/flashpoint-devices``, shared by every user of the machine
  (mode 1777, lock files 0666), since two users' processes must not share a GPU either.

Every user of the machine can write the shared directory, so nothing there is taken on trust
(``scheduler/leasetrust.py``): a directory another user owns is refused (this process then leases, and so uses, no
leased device: each is held by "an untrusted lease directory", with what to do), and a lock file that is not one
flashpoint made (a link, a planted 0600 file) is that one device held by its owner. Lock files are never deleted:
deleting one while another process has it open would split the lock in two. Without ``fcntl`` (Windows) there are no
leases; without ``/proc/locks`` (macOS) the record names the holder, as written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from flashpoint.explain import KERNEL_FACTS, LEASE_DIRECTORY, LOCK_FILE, OtherProcess
from flashpoint.fleet.inventory import Device
from flashpoint.scheduler.ownership import kernel
from flashpoint.scheduler.ownership.kernel import process_alive, process_started
from flashpoint.scheduler.ownership.leaserecords import (
    Owner,
    command_line,
    name_holder,
    parse_record,
    process_kind,
    read_record,
    record,
)
from flashpoint.scheduler.ownership.leasetrust import LEASE_DIR_ENV, directory_problem, lock_file_problem, refusal

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no leases
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_LEASE_DIR",
    "LEASE_DIR_ENV",
    "NOT_LISTED",
    "UNREADABLE",
    "DeviceLeases",
    "Owner",
    "command_line",
    "identity",
    "lease_dir",
    "prepare",
    "process_alive",
    "process_kind",
    "process_started",
    "read_record",
    "record",
]

log = logging.getLogger("flashpoint.plane")

#: the default: one directory for every user of the machine (a GPU is one machine's, whoever runs on it)
DEFAULT_LEASE_DIR = "/tmp/flashpoint-devices"
#: the most of a record read back (a record is a few hundred bytes)
_MAX_RECORD = 16 * 1024
#: how many times a lease found locked with no holder named yet is tried again at once (a reader probing it, or a
#: holder between its lock and its record)
_RETRIES = 3
#: how many times a lock file that changes between its ``lstat`` and its ``open`` is looked at again
_REOPENS = 5
#: what to do about a file system without locks
_LOCAL = f"keep the lease directory on a local disk: set {LEASE_DIR_ENV}"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_OPEN_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


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
# the leases


#: the holder named when a lease is held but the record of the kernel's holder cannot be read, where there is no
#: /proc (the record then names the holder)
UNREADABLE = OtherProcess(0, "unknown", "its lease record is not written yet or cannot be read")
#: the holder named when a lease is held but /proc/locks lists no process for it
NOT_LISTED = OtherProcess(
    0, KERNEL_FACTS, "its holder is not listed in /proc/locks: a process of another PID namespace, such as a container"
)


class DeviceLeases:
    """This process's leases, in ``root`` (``lease_dir()`` by default). Not thread-safe: the plane's loop uses it.

    ``acquire`` takes a lease or names who has it, ``release`` gives one back, ``holder``/``holders`` say who has one
    now, ``close`` gives every lease back. Every call is a few system calls and never waits for another process.
    """

    def __init__(self, owner: Owner, root: Path | None = None) -> None:
        self.owner = owner
        self.root = root if root is not None else lease_dir()
        #: the shared default (made 1777); a directory named by FLASHPOINT_LEASE_DIR is made private (0700)
        self.shared = self.root == Path(DEFAULT_LEASE_DIR)
        #: identity -> the open lock file this process holds it with
        self._held: dict[str, int] = {}
        #: identity -> the device of each lease held
        self._devices: dict[str, Device] = {}
        #: the directory was found trustworthy (it stays so: only its owner, root or this user, may change it)
        self._trusted = False
        #: only its owner may write the directory (then every lock file there should be that user's or root's)
        self._private = False
        #: why there are no leases at all (no fcntl); "" where there are
        self.off = "" if fcntl is not None else "this platform has no fcntl.flock"
        self._uid = os.getuid() if hasattr(os, "getuid") else -1
        #: the refusal of the last try to make the lease directory (None: made, or not tried)
        self._refused: OtherProcess | None = None
        #: the refusals warned about already (each is logged once)
        self._warned: set[str] = set()
        #: identity -> (endpoint, worker) of each lease held
        self._for: dict[str, tuple[str, str]] = {}
        #: identity -> the owner's uid of each held lease's lock file another user owns: that user may delete it (the
        #: sticky bit lets a file's owner), so it is looked at again (``recheck_files``)
        self._deletable: dict[str, int] = {}

    def held(self) -> tuple[str, ...]:
        """The identities of the leases this process holds."""
        return tuple(self._held)

    def held_devices(self) -> dict[str, Device]:
        """The devices of the leases this process holds, by identity."""
        return dict(self._devices)

    def acquire(self, name: str, device: Device, endpoint: str, worker: str) -> OtherProcess | None:
        """Take the lease of device ``name`` for ``worker`` of ``endpoint``: None when taken (or there are no leases
        on this platform), else who holds it: a process, or a lock file or lease directory this process cannot trust
        (``LOCK_FILE``, ``LEASE_DIRECTORY``). Taking a lease this object holds already is a bug.

        Raises:
            ValueError: this object holds the lease already.
        """
        if name in self._held:
            raise ValueError(f"the lease of {name} is held by this plane already")
        if self.off:
            return None
        refused = self._directory(create=True)
        if refused is not None:
            return refused
        opened = self._open(name, create=True)
        if not isinstance(opened, int):
            return opened or self._refuse(f"cannot make {self._path(name)}")
        fd = opened
        try:
            holder = self._lock(fd, fcntl.LOCK_EX)
        except OSError as exc:  # no locks on this file system (ENOLCK)
            os.close(fd)
            return self._refuse(f"cannot lock {self._path(name)}: {exc} ({_LOCAL})")
        if holder is not None:
            os.close(fd)
            return holder
        try:
            data = json.dumps(record(self.owner, device, name, endpoint, worker, time.time())).encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            owner = os.fstat(fd).st_uid
        except OSError as exc:  # a full disk: this device cannot be leased now
            os.close(fd)
            return self._refuse(f"cannot write the lease record of {self._path(name)}: {exc}")
        self._held[name] = fd
        self._devices[name] = device
        self._for[name] = (endpoint, worker)
        if owner not in (self._uid, 0):
            self._deletable[name] = owner
        return None

    def release(self, name: str) -> None:
        """Give the lease of ``name`` back (its record is emptied first); one this object does not hold is ignored."""
        fd = self._held.pop(name, None)
        self._devices.pop(name, None)
        self._for.pop(name, None)
        self._deletable.pop(name, None)
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the only descriptor of the lock drops it

    def holder(self, name: str) -> OtherProcess | None:
        """Who holds the lease of ``name`` now: None when nobody does (or this object does, or there are no leases).
        In a lease directory this process cannot trust, a lease nobody holds is held by that directory."""
        return self.holders((name,))[name]

    def holders(self, names: Collection[str]) -> dict[str, OtherProcess | None]:
        """``holder`` of each of ``names``. A lease directory that does not exist holds nothing, and is not made,
        unless ``acquire`` could not make it: then it is tried again (and holds everything until made)."""
        found: dict[str, OtherProcess | None] = dict.fromkeys(names)
        if self.off or (self._refused is None and not os.path.lexists(self.root)):
            return found
        refused = self._directory(create=self._refused is not None)
        for name in names:
            if name not in self._held:
                found[name] = self._probe(name, refused)
        return found

    def recheck_files(self) -> list[str]:
        """Look again at the held leases whose lock file another user owns (that user may delete it, and the next
        process would then lock a new file of the same name): one deleted or replaced is leased again through the
        file now at its path (made anew when none is). Returns what happened, in words, for the log; nothing when
        every lock file is this user's or root's (no system call then)."""
        notes: list[str] = []
        for name, uid in list(self._deletable.items()):
            fd, path = self._held[name], self._path(name)
            try:
                info = os.fstat(fd)
                now: os.stat_result | None = os.lstat(path)
            except FileNotFoundError:
                now = None
            except OSError:
                continue
            if info.st_nlink and now is not None and (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                continue
            device, (endpoint, worker) = self._devices[name], self._for[name]
            del self._held[name], self._devices[name], self._for[name], self._deletable[name]
            other = self.acquire(name, device, endpoint, worker)
            who = f"{path}, a lock file of user {kernel.user_name(uid)} (uid {uid}), was deleted or replaced"
            if other is None:
                os.close(fd)
                notes.append(f"{who} while this process held its lease; leased again through the file now there")
                continue
            # someone else holds the new file: this process's worker still runs there, so the old lease stays its own
            self._held[name], self._devices[name], self._for[name] = fd, device, (endpoint, worker)
            notes.append(f"{who} while this process held its lease, and {other.label} holds it now: both may use it")
        return notes

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

    def _path(self, name: str) -> Path:
        return self.root / f"{name}.lock"

    def _directory(self, *, create: bool) -> OtherProcess | None:
        """None when the lease directory can be trusted (``create``: made if missing, and writable by this user);
        else the refusal that holds every device there."""
        if self._trusted:
            return None
        refused = self._judge(create=create)
        if create:
            self._refused = refused
        return refused

    def _judge(self, *, create: bool) -> OtherProcess | None:
        path = str(self.root)
        if create:
            try:
                prepare(self.root, shared=self.shared)
            except OSError as exc:
                problem = f"cannot make the lease directory {path}: {exc}"
                return self._refuse(refusal(problem, path=path, default=self.shared, judged=False))
        try:
            info = os.lstat(self.root)
        except OSError as exc:
            problem = f"cannot look at the lease directory {path}: {exc}"
            return self._refuse(refusal(problem, path=path, default=self.shared, judged=False))
        judged = directory_problem(path, mode=info.st_mode, uid=info.st_uid, own_uid=self._uid)
        if judged is not None:
            return self._refuse(refusal(judged, path=path, default=self.shared, judged=True))
        if create and not os.access(self.root, os.W_OK | os.X_OK):
            problem = f"{path} is not writable by this user (uid {self._uid})"
            return self._refuse(refusal(problem, path=path, default=self.shared, judged=False))
        self._private = not stat.S_IMODE(info.st_mode) & 0o022
        self._trusted = create
        return None

    def _refuse(self, why: str) -> OtherProcess:
        """The lease directory cannot be used: every device there is held by it. Warned about once."""
        if why not in self._warned:
            self._warned.add(why)
            log.warning("device leases: %s", why)
        return OtherProcess(0, LEASE_DIRECTORY, why)

    def _foreign(self, name: str, uid: int, problem: str) -> OtherProcess:
        """A lock file this process cannot lease through: the device is held by the file's owner."""
        user = kernel.user_name(uid) if uid != self._uid else ""
        return OtherProcess(0, LOCK_FILE, f"{self._path(name)} {problem}", user=user, uid=uid)

    def _open(self, name: str, *, create: bool, write: bool = True) -> int | OtherProcess | None:
        """Open the lock file of ``name`` (``write``: read-write; a new one 0666, so every user can lock it): its
        descriptor; None when there is none (and not ``create``); the owner of a file that is no lock file this
        process trusts (``leasetrust.lock_file_problem``), or the directory's refusal when it cannot be made.

        Never through a link, never blocking (a FIFO), never a file that changed between its ``lstat`` and its
        ``open``. An existing file is opened without ``O_CREAT``: in a sticky world-writable directory Linux refuses
        ``O_CREAT`` on another user's file (``fs.protected_regular``).
        """
        path = str(self._path(name))
        flags = (os.O_RDWR if write else os.O_RDONLY) | _OPEN_FLAGS
        for _ in range(_REOPENS):
            try:
                before = os.lstat(path)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
                except FileExistsError:
                    continue  # another process made it in between: look at it as it is
                except OSError as exc:
                    return self._refuse(f"cannot make {path}: {exc}")
                try:
                    os.fchmod(fd, 0o666)  # past the umask
                except OSError:
                    pass
                return fd
            except OSError as exc:
                return self._refuse(f"cannot look at {path}: {exc}")
            problem = self._problem(before)
            if problem is not None:
                return self._foreign(name, before.st_uid, problem)
            try:
                fd = os.open(path, flags)
            except FileNotFoundError:
                continue
            except OSError as exc:
                return self._foreign(name, before.st_uid, f"cannot be opened ({exc.strerror or exc})")
            info = os.fstat(fd)
            problem = self._problem(info)
            if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) or problem is not None:
                os.close(fd)
                if problem is not None:
                    return self._foreign(name, info.st_uid, problem)
                continue
            if write and info.st_uid == self._uid and stat.S_IMODE(info.st_mode) != 0o666:
                try:
                    os.fchmod(fd, 0o666)  # this user's own file (an older flashpoint's): every user may lock it
                except OSError:
                    pass
            return fd
        return self._foreign(name, -1, "keeps changing while it is opened")

    def _problem(self, info: os.stat_result) -> str | None:
        return lock_file_problem(info.st_mode, info.st_uid, info.st_nlink, own_uid=self._uid, private=self._private)

    def _probe(self, name: str, refused: OtherProcess | None) -> OtherProcess | None:
        """Who holds the lease of ``name``: its holder when it is held, else ``refused`` (None, or the refusal of a
        lease directory this process cannot trust)."""
        opened = self._open(name, create=False, write=False)
        if not isinstance(opened, int):
            if opened is None or (refused is not None and opened.kind == LEASE_DIRECTORY):
                return refused  # no lock file (or no directory to hold one): nobody holds it, but the refusal
            return opened
        try:
            holder = self._lock(opened, fcntl.LOCK_SH)
        except OSError as exc:  # no locks on this file system (ENOLCK)
            return self._refuse(f"cannot lock {self._path(name)}: {exc} ({_LOCAL})")
        finally:
            os.close(opened)  # a shared probe's lock goes with it
        return refused if holder is None else holder  # free: the record there, if any, is stale

    def _lock(self, fd: int, how: int) -> OtherProcess | None:
        """Lock the open lock file ``fd`` (``LOCK_EX`` or ``LOCK_SH``) without waiting: None when locked, else who
        holds it, asked again up to ``_RETRIES`` times while the holder cannot be named yet (``UNREADABLE`` after).

        Raises:
            OSError: the file system has no locks (``ENOLCK``).
        """
        for attempt in range(_RETRIES):
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._held_by(fd, last=attempt == _RETRIES - 1)
                if holder is not None:
                    return holder
                continue
            return None
        return UNREADABLE

    def _held_by(self, fd: int, *, last: bool) -> OtherProcess | None:
        """Who holds the exclusive lock of the open lock file ``fd`` (this process's own probe just failed): the
        kernel's holder, described by its record when that is its own. None to try again (a reader's shared probe,
        a holder between its lock and its record, a lock let go in between) unless ``last``."""
        try:
            data = os.pread(fd, _MAX_RECORD, 0)
            info = os.fstat(fd)
        except OSError:
            data, info = b"", None
        text = kernel.locks_text()
        if text is None or info is None:  # no /proc (macOS): the record says who, as written
            found = read_record(data, own_pid=os.getpid(), own_uid=self._uid)
            return found if found is not None or not last else UNREADABLE
        writers = [line for line in kernel.flock_holders(text, info.st_dev, info.st_ino) if line.exclusive]
        if not writers:
            return NOT_LISTED if last else None
        if parse_record(data) is None and not last:
            return None
        pid = writers[0].pid
        facts = kernel.process_facts(pid) if pid > 0 else None
        return name_holder(pid, facts, data, own_pid=os.getpid(), own_uid=self._uid)


def prepare(root: Path, *, shared: bool) -> None:
    """Make the lease directory when it is missing. The shared default is made sticky and world-writable (1777, like
    /tmp), so every user's processes can lock its files and none can remove another's; a directory named by
    ``FLASHPOINT_LEASE_DIR`` is made private (0700). An existing one is left as it is (``leasetrust`` judges it).

    Raises:
        OSError: it cannot be made.
    """
    mode = 0o1777 if shared else 0o700
    try:
        root.mkdir(parents=True, exist_ok=False, mode=mode)
    except FileExistsError:
        return
    os.chmod(root, mode)  # past the umask
