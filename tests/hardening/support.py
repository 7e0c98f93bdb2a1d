"""Helpers of the hardening tests: strict JSON, and finding a server's worker processes in
/proc (Linux). Only processes whose environment names a server these tests started are ever looked at closely."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import until

__all__ = ["APP", "Proc", "kill_worker", "strict_json", "until", "worker_processes"]

#: the app every hardening test serves (relative to the repository root, as the ``serve`` fixture takes it)
APP = "tests/hardening/hardening_app.py"

if not Path("/proc/self/stat").is_file():  # pragma: no cover - CI runs on Linux
    pytest.skip("the hardening tests find worker processes in /proc (Linux only)", allow_module_level=True)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str) -> Any:
    """Parse ``text`` as standard JSON: NaN and Infinity (which Python's json both writes and reads) are refused."""
    return json.loads(text, parse_constant=_refuse_constant)


@dataclass(frozen=True)
class Proc:
    """One process, identified by pid and start time (so a reused pid is never mistaken for it)."""

    pid: int
    start: int
    worker_id: str

    def alive(self) -> bool:
        """Still running: present, the same process, and not a zombie waiting to be reaped."""
        stat = _stat(self.pid)
        return stat is not None and stat[2] == self.start and stat[0] != "Z"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks) from /proc/PID/stat, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def worker_processes(server_pid: int, *, children_only: bool = True) -> list[Proc]:
    """Live worker processes started by the server with pid ``server_pid``.

    A worker's environment carries ``FLASHPOINT_PARENT_PID`` (its server) and ``FLASHPOINT_WORKER_ID``. With
    ``children_only`` the worker must still be that server's child; without it, orphans of a killed server count too.
    """
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat[0] == "Z" or (children_only and stat[1] != server_pid):
            continue
        env = _environ(pid)
        if env.get("FLASHPOINT_PARENT_PID") == str(server_pid) and "FLASHPOINT_WORKER_ID" in env:
            found.append(Proc(pid, stat[2], env["FLASHPOINT_WORKER_ID"]))
    return found


def kill_worker(proc: Proc, server_pid: int, sig: int) -> bool:
    """Signal ``proc`` only if it is still the same worker child of ``server_pid``; return whether it was signalled."""
    stat = _stat(proc.pid)
    if stat is None or stat[0] == "Z" or stat[1] != server_pid or stat[2] != proc.start:
        return False
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True
