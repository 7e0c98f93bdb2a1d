"""Want marks: a flashpoint process that waits for a device another process of this machine holds says so, and the
holder's idle workers give the device up (DESIGN §3 rule 4, "an idle worker above its endpoint's minimum gives its
devices up at once when another endpoint waits for them", across processes; docs/architecture.md, "One owner per
device").

A mark is a file ``<lease dir>/wants/<identity>.want-<pid>-<token>`` holding the wanter's record (``leases.record``: who
it is, for which endpoint). The wanter refreshes it (its mtime) at every lease recheck while it waits and removes it
when it stops waiting or closes; a mark whose process is dead, or that was not refreshed for ``FRESH_S`` seconds, is
read as withdrawn. The holder reads the marks of the devices it holds at each recheck; its planner stops its idle
workers above their minimum on a wanted device (``planner.plan(wanted=...)``), and the lease they give back reaches
the wanter at its next recheck. Whoever takes the lease first has the device: the lease, not the mark, decides.

Trust: the lease directory is shared by every user of the machine, so a mark is believed only when the kernel agrees
with it: the process its name and record give (the pid) is alive, its real uid is the mark file's owner, and its start
time (clock ticks, /proc/PID/stat) is the record's. A mark naming pid 1, or another user's process, is nobody's.
Another user can still mark a device for a process of their own, and so make this process's idle workers above their
minimum stop early (they start again on demand), and nothing else: a mark is data, read bounded and never through a
link. Without /proc (macOS) a live pid is enough, as written.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import stat
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from flashpoint.explain import OtherProcess
from flashpoint.fleet.inventory import Device
from flashpoint.scheduler.ownership import kernel
from flashpoint.scheduler.ownership.leaserecords import matches, parse_record
from flashpoint.scheduler.ownership.leases import Owner, prepare, process_alive, read_record, record

__all__ = ["FRESH_S", "MAX_ENTRIES", "WANTS_DIR", "WantMarks"]

#: the folder of the lease directory marks live in (apart from the lock files, so a reader scans marks only)
WANTS_DIR = "wants"
#: a mark not refreshed for this long is read as withdrawn (its writer refreshes it twice a second while it waits)
FRESH_S = 5.0
#: the most entries of the marks' folder looked at per recheck: a folder every user can fill stays a bounded read
#: (past it, marks may go unseen: the device is then given up at its idle_timeout, as before marks)
MAX_ENTRIES = 10_000
#: the most of a mark read back (a record is a few hundred bytes)
_MAX_RECORD = 16 * 1024
_SEPARATOR = ".want-"


class WantMarks:
    """This plane's marks on devices it waits for, and the marks other planes put on devices it holds.

    One per plane: ``token`` tells two planes of one process apart. ``root`` is the marks' folder (``<lease
    dir>/wants``), made at the first mark (never the lease directory itself), sticky and world-writable when the lease
    directory is. Every call is a few system calls; a folder that cannot be used makes marks a no-op.
    """

    def __init__(self, owner: Owner, root: Path) -> None:
        self.owner = owner
        self.root = root
        self._ready = False
        self.token = secrets.token_hex(4)
        #: identity -> the open file of this plane's mark on it
        self._marks: dict[str, int] = {}
        self._uid = os.getuid() if hasattr(os, "getuid") else None

    @property
    def suffix(self) -> str:
        """What ends the name of every mark of this plane (after the device's identity)."""
        return f"{_SEPARATOR}{self.owner.pid}-{self.token}"

    def marked(self) -> tuple[str, ...]:
        """The identities this plane marks now."""
        return tuple(self._marks)

    def mark(self, wanted: Mapping[str, tuple[Device, str]]) -> None:
        """Mark exactly the devices of ``wanted`` (``{identity: (device, endpoint waiting for it)}``): new marks are
        made, kept ones refreshed, the others withdrawn."""
        for name in [n for n in self._marks if n not in wanted]:
            self._withdraw(name)
        if wanted and not self._usable():
            return
        for name, (device, endpoint) in wanted.items():
            fd = self._marks.get(name)
            if fd is not None:
                try:
                    os.utime(fd)
                except OSError:
                    pass
                continue
            path = self.root / f"{name}{self.suffix}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            try:
                fd = os.open(path, flags, 0o644)
            except OSError:  # the directory is not usable (leases say so), or a name this plane cannot take
                continue
            try:
                os.write(fd, json.dumps(record(self.owner, device, name, endpoint, "", time.time())).encode())
            except OSError:
                os.close(fd)
                _unlink(path)
                continue
            self._marks[name] = fd

    def wanters(self, names: Collection[str]) -> dict[str, OtherProcess]:
        """Per device of ``names`` (identities this plane holds): a plane other than this one that wants it now (the
        first found). Marks of dead processes are removed on the way, where this user may."""
        if not names:
            return {}
        entries = _entries(self.root)
        now = time.time()
        found: dict[str, OtherProcess] = {}
        for entry in entries:
            name, separator, who = entry.name.rpartition(_SEPARATOR)
            if not separator or name not in names or name in found or entry.name.endswith(self.suffix):
                continue
            pid_text = who.partition("-")[0]
            if not pid_text.isdigit():
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if not process_alive(int(pid_text)):
                _unlink(Path(entry.path))
                continue
            if now - info.st_mtime > FRESH_S:
                continue
            process = self._read(Path(entry.path), int(pid_text))
            if process is not None:
                found[name] = process
        return found

    def _usable(self) -> bool:
        if not self._ready:
            try:
                # the lease directory is the leases' to make, with its mode; the marks' folder is shared as it is
                mode = stat.S_IMODE(os.stat(self.root.parent).st_mode)
                prepare(self.root, shared=mode & 0o1777 == 0o1777)
            except OSError:
                return False
            self._ready = True
        return True

    def close(self) -> None:
        """Withdraw every mark."""
        for name in list(self._marks):
            self._withdraw(name)

    def __del__(self) -> None:  # a plane never closed (a test's): its marks go with it
        try:
            self.close()
        except Exception:  # at interpreter exit, os may be half torn down; a dead pid's marks are read as none
            pass

    def _withdraw(self, name: str) -> None:
        fd = self._marks.pop(name)
        _unlink(self.root / f"{name}{self.suffix}")
        os.close(fd)

    def _read(self, path: Path, pid: int) -> OtherProcess | None:
        """The wanter a mark of process ``pid`` names, when the kernel agrees (see the module's "Trust")."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(path, flags)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            data = os.read(fd, _MAX_RECORD) if stat.S_ISREG(info.st_mode) else b""
        except OSError:
            return None
        finally:
            os.close(fd)
        process = read_record(data, own_pid=os.getpid(), own_uid=self._uid)
        if process is None or process.pid != pid:
            return None
        if not kernel.HAVE_PROC:
            return process
        facts = kernel.process_facts(pid)
        found = parse_record(data)
        if facts is None or found is None or facts.uid != info.st_uid or not matches(found, facts):
            return None
        return process


def _entries(root: Path) -> list[os.DirEntry[str]]:
    """The lease directory's entries, ``MAX_ENTRIES`` at most (in the directory's own order); none when it cannot be
    read."""
    try:
        with os.scandir(root) as listing:
            return list(itertools.islice(listing, MAX_ENTRIES))
    except OSError:
        return []


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # gone already, or another user's in a sticky directory
        pass
