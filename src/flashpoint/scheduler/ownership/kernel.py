"""What the kernel says about processes and locks (Linux's ``/proc``): who holds a ``flock``, a process's real uid and
start time.

Lease records and want marks are files any local user can write, so who holds a device's lease, and who wrote a want
mark, is taken from here, never from what such a file says (docs/architecture.md, "One owner per device"). A record
only adds descriptive fields (endpoint, worker, command) once the kernel's facts agree with it.

- ``parse_locks(text)`` (pure) reads ``/proc/locks``: the granted ``FLOCK`` locks, each with its pid, whether it is
  exclusive, and the file (``major:minor:inode``); blocked waiters (``->``), POSIX, OFD and lease lines are left out.
- ``flock_holders(text, dev, ino)`` picks the locks of one file.
- ``process_facts(pid)``: a live process's real uid and start time; None when it is gone (or /proc does not say).

Without ``/proc`` (macOS, Windows) every function says "unknown" (None), and callers fall back to what records say.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HAVE_PROC",
    "LockLine",
    "ProcessFacts",
    "flock_holders",
    "locks_text",
    "parse_locks",
    "process_alive",
    "process_facts",
    "process_started",
    "process_ticks",
    "process_uid",
    "user_name",
]

#: whether this machine has Linux's /proc (without it, callers fall back to what records say)
HAVE_PROC = Path("/proc/self/stat").is_file()
#: the most of /proc/locks read (a line is about 50 bytes: some 80,000 locks)
_MAX_LOCKS_TEXT = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LockLine:
    """One granted ``flock`` of ``/proc/locks``: who took it, how, on which file."""

    #: the process that took it (a process that inherited the open file still holds it under this pid); 0 or less
    #: when the taker is not visible from this PID namespace
    pid: int
    #: LOCK_EX (``WRITE``), else LOCK_SH (``READ``)
    exclusive: bool
    major: int
    minor: int
    inode: int


def parse_locks(text: str) -> list[LockLine]:
    """The granted ``FLOCK`` locks listed in ``text`` (``/proc/locks``), in order. Blocked waiters (``N: -> ...``),
    POSIX, OFD (``OFDLCK``) and lease lines, and lines that do not parse, are left out.

    A line reads ``1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146314 0 EOF``: the device's major and minor numbers are
    hexadecimal, the inode decimal.
    """
    found: list[LockLine] = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 6 or words[1] != "FLOCK" or words[3] not in ("READ", "WRITE"):
            continue
        parts = words[5].split(":")
        if len(parts) != 3:
            continue
        try:
            found.append(
                LockLine(int(words[4]), words[3] == "WRITE", int(parts[0], 16), int(parts[1], 16), int(parts[2]))
            )
        except ValueError:
            continue
    return found


def flock_holders(text: str, dev: int, ino: int) -> list[LockLine]:
    """The granted flocks of the file ``dev``/``ino`` (its ``stat``) in ``text`` (``/proc/locks``).

    Some file systems (btrfs subvolumes) show ``stat`` a device number other than the one ``/proc/locks`` prints; when
    no line matches both, the lines of that inode count if they all name one device.
    """
    lines = parse_locks(text)
    exact = [line for line in lines if (line.major, line.minor, line.inode) == (os.major(dev), os.minor(dev), ino)]
    if exact:
        return exact
    same_inode = [line for line in lines if line.inode == ino]
    return same_inode if len({(line.major, line.minor) for line in same_inode}) == 1 else []


def locks_text() -> str | None:
    """``/proc/locks``; None where there is none (not Linux) or it cannot be read."""
    try:
        with open("/proc/locks", "rb") as handle:
            return handle.read(_MAX_LOCKS_TEXT).decode(errors="replace")
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """A live process as the kernel knows it."""

    pid: int
    #: its real uid
    uid: int
    #: when it started, in clock ticks after boot (``process_ticks``): with the pid, names one process for good
    ticks: int | None


def process_facts(pid: int) -> ProcessFacts | None:
    """Process ``pid``'s real uid and start time from /proc; None when it is gone or /proc does not say."""
    if pid <= 0:
        return None
    uid = process_uid(pid)
    if uid is None:
        return None
    return ProcessFacts(pid, uid, process_ticks(pid))


def process_uid(pid: int) -> int | None:
    """The real uid of process ``pid`` (``Uid:`` of /proc/PID/status); None when it is gone or unknown."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def process_ticks(pid: int | None = None) -> int | None:
    """When process ``pid`` (this one by default) started, in clock ticks after boot (field 22 of /proc/PID/stat);
    None where that is not known. Unlike a wall time, it never moves when the clock is set."""
    try:
        fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])  # field 22, starttime, counted from field 3
    except (OSError, ValueError, IndexError):
        return None


def process_started(pid: int | None = None) -> float | None:
    """The wall time process ``pid`` (this one by default) started, from /proc; None where that is not known."""
    ticks = process_ticks(pid)
    if ticks is None:
        return None
    try:
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


def user_name(uid: int) -> str:
    """The name of user ``uid``, else the number."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)
