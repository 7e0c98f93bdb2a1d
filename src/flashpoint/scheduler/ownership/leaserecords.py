"""Lease records: who a flashpoint process says it is, written into its lock files and want marks, and how a reader
names a holder (docs/architecture.md, "One owner per device").

Lock files and marks sit in a directory every local user of the machine can write, so a record is a claim, not a
fact. Who holds a lease comes from the kernel (``scheduler/kernel.py``: the pid in ``/proc/locks``, its real uid and
start time); a record only adds the holder's kind, command line, URL, endpoint and worker, and only when its pid,
uid and start time are the kernel's (``name_holder``). A record holds nothing secret, since every user of the
machine can read it: its command line names the program and the app only (a script's own arguments are left out),
and ``flashpoint serve``/``dev``'s option values that look like credentials (``--api-key``, ``--token``, ``*-secret``,
``--password``, ...) and the passwords of URLs are replaced with ``***`` (``command_line``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashpoint.explain import KERNEL_FACTS, OtherProcess
from flashpoint.fleet.inventory import Device
from flashpoint.scheduler.ownership import kernel

__all__ = [
    "HIDDEN",
    "Owner",
    "command_line",
    "name_holder",
    "parse_record",
    "process_kind",
    "read_record",
    "record",
    "redact",
]

#: what stands in a record for a value it must not show
HIDDEN = "***"
#: an option whose value is a credential: its name ends in key, token, secret, password (or passwd, credential)
_SECRET_OPTION = re.compile(r"--?[A-Za-z0-9_.-]*(key|token|secret|password|passwd|credentials?)s?", re.IGNORECASE)
#: the password of a URL (``scheme://user:password@host``)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]*(?P<tail>@)")


@dataclass(frozen=True, slots=True)
class Owner:
    """This process, as its lease records name it."""

    pid: int
    #: wall time the process started (None where /proc does not say)
    started: float | None
    kind: str
    command: str
    url: str
    #: when the process started, in clock ticks after boot (``kernel.process_ticks``); a reader believes a record only
    #: when this is the kernel's too (None where /proc does not say)
    ticks: int | None = None

    @classmethod
    def this_process(cls, kind: str, url: str) -> Owner:
        return cls(os.getpid(), kernel.process_started(), kind, command_line(sys.argv), url, kernel.process_ticks())


def process_kind(argv: Sequence[str], server: bool) -> str:
    """What the process is: ``flashpoint serve`` / ``flashpoint dev`` when run as that command, else ``flashpoint
    serve`` for a durable plane (``server``, an in-process ``Server``), else ``script``."""
    if len(argv) > 1 and argv[1] in ("serve", "dev"):
        program = Path(argv[0])
        if program.name == "flashpoint" or (program.name == "__main__.py" and program.parent.name == "flashpoint"):
            return f"flashpoint {argv[1]}"
    return "flashpoint serve" if server else "script"


def redact(argv: Sequence[str]) -> list[str]:
    """``argv`` with every credential hidden: the value of an option whose name ends in key, token, secret, password
    (``--api-key KEY``, ``--api-key=KEY``, ``--hf-token T``, ``--db-password P``) and the password of a URL."""
    shown: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            shown.append(HIDDEN)
            hide_next = False
            continue
        name, equals, _ = word.partition("=")
        if word.startswith("-") and _SECRET_OPTION.fullmatch(name):
            if equals:
                shown.append(f"{name}={HIDDEN}")
            else:
                shown.append(word)
                hide_next = True
            continue
        shown.append(_URL_PASSWORD.sub(rf"\g<head>{HIDDEN}\g<tail>", word))
    return shown


def command_line(argv: Sequence[str], limit: int = 160) -> str:
    """The command line as a record shows it: the program's own name (``flashpoint`` for
    ``.../flashpoint/__main__.py``), then only what names the app, never data. ``flashpoint serve``/``dev`` keep
    their arguments (the app, flashpoint's own options) with credentials hidden (``redact``); another flashpoint
    command keeps its name and the argument right after it when that is no option (``flashpoint run job.py``); a
    script keeps its name alone: its arguments are its own, and may be anything. Cut at ``limit`` characters."""
    if not argv:
        return ""
    program = Path(argv[0])
    name = (program.parent.name if program.name == "__main__.py" else program.name) or "python"
    words = [name]
    if name == "flashpoint" and len(argv) > 1:
        if argv[1] in ("serve", "dev"):
            words += redact(argv[1:])
        else:
            words += [argv[1], *[word for word in argv[2:3] if not word.startswith("-")]]
    text = " ".join(words)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def record(owner: Owner, device: Device, name: str, endpoint: str, worker: str, now: float) -> dict[str, Any]:
    """What the holder of a lease writes into its lock file (and a wanter into its mark)."""
    return {
        "version": 1,
        "pid": owner.pid,
        "started": owner.started,
        "ticks": owner.ticks,
        "uid": os.getuid() if hasattr(os, "getuid") else None,
        "kind": owner.kind,
        "command": owner.command,
        "url": owner.url,
        "endpoint": endpoint,
        "worker": worker,
        "device": {"identity": name, "node": device.node, "index": device.index, "model": device.model_name},
        "since": round(now, 3),
    }


def parse_record(data: bytes) -> dict[str, Any] | None:
    """A record's fields; None when ``data`` is none (empty, torn, not JSON, no positive pid)."""
    try:
        found = json.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(found, dict):
        return None
    try:
        pid = int(found["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    return found if pid > 0 else None


def _described(found: dict[str, Any], pid: int, user: str, own_pid: int, uid: int | None) -> OtherProcess:
    return OtherProcess(
        pid=pid,
        kind=str(found.get("kind") or "unknown"),
        command=str(found.get("command") or ""),
        url=str(found.get("url") or ""),
        endpoint=str(found.get("endpoint") or ""),
        worker=str(found.get("worker") or ""),
        user=user,
        same_process=pid == own_pid,
        uid=uid,
    )


def read_record(data: bytes, *, own_pid: int, own_uid: int | None) -> OtherProcess | None:
    """The holder a record names, believed as written: only where the kernel cannot say (no /proc). None when it names
    nobody readable (empty, torn or not JSON)."""
    found = parse_record(data)
    if found is None:
        return None
    value = found.get("uid")
    uid = value if isinstance(value, int) and not isinstance(value, bool) else None
    user = kernel.user_name(uid) if uid is not None and own_uid is not None and uid != own_uid else ""
    return _described(found, int(found["pid"]), user, own_pid, uid)


def matches(found: dict[str, Any], facts: kernel.ProcessFacts) -> bool:
    """Whether a record is the process's own: its pid, uid and start time (clock ticks) are the kernel's."""
    ticks, uid = found.get("ticks"), found.get("uid")
    return (
        int(found["pid"]) == facts.pid
        and facts.ticks is not None
        and isinstance(ticks, int)
        and ticks == facts.ticks
        and isinstance(uid, int)
        and uid == facts.uid
    )


def name_holder(
    pid: int, facts: kernel.ProcessFacts | None, data: bytes, *, own_pid: int, own_uid: int | None
) -> OtherProcess:
    """The holder the kernel names (``pid``, and its ``facts``: None when it is gone), described by the record
    ``data`` when that record is its own (``matches``), else by the kernel's facts alone (``KERNEL_FACTS``: "pid N
    of user U")."""
    if pid <= 0:
        return OtherProcess(
            0, KERNEL_FACTS, "a process of another PID namespace (a container) holds it: /proc does not name it"
        )
    if facts is None:
        return OtherProcess(
            pid,
            KERNEL_FACTS,
            "the process that took the lease has exited; a process it started holds it still",
            same_process=pid == own_pid,
        )
    user = kernel.user_name(facts.uid)
    found = parse_record(data)
    if found is not None and matches(found, facts):
        return _described(found, pid, user if facts.uid != own_uid else "", own_pid, facts.uid)
    return OtherProcess(pid, KERNEL_FACTS, user=user, same_process=pid == own_pid, uid=facts.uid)
