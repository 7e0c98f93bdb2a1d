"""Which lease directories and lock files a flashpoint process may trust (pure decisions over ``lstat`` facts;
docs/architecture.md, "One owner per device").

A lease is an exclusive ``flock`` on a lock file. Whoever may delete a lock file while another process holds it can
split that lease in two (the next process locks a new file of the same name): in a sticky directory that is the
file's owner, the directory's owner and root; in a directory without the sticky bit, everyone who may write it. So:

- **The lease directory** is trusted only when it is a real directory (not a link) owned by root or by this process's
  user, and nobody else may write it, or its sticky bit is set (mode 1777, like ``/tmp``). The default
  ``/tmp/flashpoint-devices`` is made so (root's, when root makes it first); another user's is refused
  (``directory_problem``), and this process then leases no device (the devices are held by "an untrusted lease
  directory", with what to do: ``refusal``).
- **A lock file** is trusted when it is a regular file with one name, mode 0666 (every user may lock it), and, in a
  directory only its owner may write, owned by that user or root (``lock_file_problem``). Anything else (a link, a
  0600 file another user planted, a directory, a hard link) is "held by its owner (uid N)", for that device only.
"""

from __future__ import annotations

import stat

from flashpoint.scheduler.ownership.kernel import user_name

__all__ = ["LEASE_DIR_ENV", "directory_problem", "lock_file_problem", "refusal"]

#: where lease files live, when set
LEASE_DIR_ENV = "FLASHPOINT_LEASE_DIR"

#: the mode of every lock file: every user of the machine may open and lock it
LOCK_FILE_MODE = 0o666


def _owner(uid: int) -> str:
    return f"user {user_name(uid)} (uid {uid})"


def directory_problem(path: str, *, mode: int, uid: int, own_uid: int) -> str | None:
    """Why the lease directory ``path`` (its ``lstat``: ``st_mode``, ``st_uid``) cannot be trusted by a process of user
    ``own_uid``; None when it can."""
    if stat.S_ISLNK(mode):
        return f"{path} is a symbolic link, not a directory"
    if not stat.S_ISDIR(mode):
        return f"{path} is not a directory"
    bits = stat.S_IMODE(mode)
    if uid not in (0, own_uid):
        return (
            f"{path} belongs to {_owner(uid)}, mode {bits:04o}: its owner can delete the lock files other users' "
            "processes hold, and so give one GPU to two processes"
        )
    if bits & 0o022 and not bits & stat.S_ISVTX:
        return (
            f"{path} ({_owner(uid)}) has mode {bits:04o}: other users can write it without the sticky bit, so they can "
            "delete the lock files other processes hold"
        )
    return None


def refusal(problem: str, *, path: str, default: bool, judged: bool) -> str:
    """The words of a lease directory this process cannot use: ``problem``, what it means, and what to do.
    ``default``: the shared ``/tmp/flashpoint-devices`` (else one named by ``FLASHPOINT_LEASE_DIR``); ``judged``: it
    exists and ``directory_problem`` refused its owner or mode (else it cannot be made, read or written)."""
    own = f"set {LEASE_DIR_ENV} to a directory of your own (private, or mode 1777 for several users)"
    if judged and default:
        fix = (
            f"have root take it over (sudo chown root:root {path} && sudo chmod 1777 {path}), or remove it once no "
            f"flashpoint process uses it, or {own}: your processes then keep out of each other's way only"
        )
    else:
        fix = f"fix it, or {own}"
    return f"{problem}; this process leases no device there, so it starts no worker on a leased device: {fix}"


def lock_file_problem(mode: int, uid: int, nlink: int, *, own_uid: int, private: bool) -> str | None:
    """Why a lock file (its ``lstat`` or ``fstat``) is not one a process of user ``own_uid`` may lease through; None
    when it is. ``private``: the lease directory is written by its owner only. The mode of this user's own file is
    not judged (the caller makes it 0666)."""
    if stat.S_ISLNK(mode):
        return "is a symbolic link, not a lock file"
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    if nlink != 1:
        return f"has {nlink} names (a hard link), not a lock file flashpoint made"
    bits = stat.S_IMODE(mode)
    if uid != own_uid and bits != LOCK_FILE_MODE:
        return f"has mode {bits:04o}, not the 0666 of a lock file flashpoint made"
    if private and uid not in (0, own_uid):
        return f"belongs to {_owner(uid)} in a directory only its owner may write"
    return None
