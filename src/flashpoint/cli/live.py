"""Live control planes on this machine: the announcement files embedded planes write, and HTTP calls to them.

Edge module: may import anything in flashpoint, plus httpx.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flashpoint.config import Settings
from flashpoint.errors import Error

#: seconds to wait for a plane's answer; planes answer from memory, so anything slower means it is stuck
TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class LivePlane:
    """An embedded control plane announced by a running process: where it listens and its API key."""

    pid: int
    url: str
    key: str
    file: Path

    def get(self, path: str) -> dict[str, Any] | None:
        """GET ``path`` as JSON; None on 404; ``Error`` when the plane cannot be reached or refuses."""
        try:
            response = httpx.get(
                self.url + path, headers={"Authorization": f"Bearer {self.key}"}, timeout=TIMEOUT_S, trust_env=False
            )
        except httpx.HTTPError as exc:
            raise Unreachable(f"flashpoint process {self.pid} at {self.url} did not answer: {exc}") from exc
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise Error(f"flashpoint process {self.pid} at {self.url} answered {response.status_code}: {response.text}")
        body: dict[str, Any] = response.json()
        return body


class Unreachable(Error):
    """A plane's process is alive but its HTTP routes do not answer (stuck, or the pid was reused)."""


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there; let the HTTP call decide
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


def _pid_from_name(path: Path) -> int:
    head = path.stem.partition("-")[0]
    return int(head) if head.isdigit() else -1


def live_planes(settings: Settings) -> list[LivePlane]:
    """The planes announced under ``<state_dir>/run`` whose process is alive, oldest file first.

    Files of processes that are gone (killed before they could clean up) are removed.
    """
    folder = settings.state_dir / "run"
    if not folder.is_dir():
        return []
    planes: list[LivePlane] = []
    files = sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime if p.exists() else 0.0, p.name))
    for path in files:
        try:
            data = json.loads(path.read_text())
            pid, url, key = int(data["pid"]), str(data["url"]), str(data["key"])
        except (OSError, ValueError, KeyError, TypeError):
            # Unreadable: half-written by a starting plane, or garbage. Only a dead writer's file is removed.
            if not _alive(_pid_from_name(path)):
                path.unlink(missing_ok=True)
            continue
        if not _alive(pid):
            path.unlink(missing_ok=True)
            continue
        planes.append(LivePlane(pid, url, key, path))
    return planes


def describe(plane: LivePlane) -> str:
    return f"flashpoint process {plane.pid} ({plane.url})"


def no_plane_message(settings: Settings) -> str:
    return (
        f"no running flashpoint process found on this machine (announcements in {settings.state_dir / 'run'}); "
        "start your script, or pass --app app.py to explain its endpoints against this machine's fleet"
    )
