"""Live control planes: the planes this user's announcements (``hosting/announce.py``) name, and HTTP calls to them.

Each live plane's ``kind`` says what runs it: a script (an embedded plane), ``flashpoint serve`` or ``flashpoint dev``
(with its app or project folder); its ``key`` is the key that plane minted for this machine's CLI (None when it asks
for none). A plane named with ``--url`` is a ``LivePlane`` too, with no pid and no file.

Edge module: may import anything in flashpoint, plus httpx.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flashpoint.config import Settings
from flashpoint.errors import ConfigError, Error, NotFoundError
from flashpoint.hosting import announce
from flashpoint.sdk.client import error_for
from flashpoint.terminal import inert

#: seconds to wait for a plane's answer; planes answer from memory, so anything slower means it is stuck
TIMEOUT_S = 5.0

#: what ``kind`` says: a script's embedded plane, a ``flashpoint serve`` or ``flashpoint dev`` process, a server named
#: with ``--url``
SCRIPT, SERVER, DEV, URL = "script", "server", "dev", "url"


@dataclass(frozen=True, slots=True)
class LivePlane:
    """A control plane the CLI can talk to: where it listens, its API key, and what runs it."""

    pid: int | None
    url: str
    key: str | None
    file: Path | None = None
    #: ``SCRIPT``, ``SERVER`` (``flashpoint serve``), ``DEV`` (``flashpoint dev``) or ``URL``
    kind: str = SCRIPT
    #: the app a server serves (``flashpoint serve APP``)
    app: str | None = None
    #: seconds to wait for an answer, on top of any long-poll hold asked for
    timeout_s: float = TIMEOUT_S

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any] | None:
        """GET ``path`` as JSON; None on 404; ``Error`` when the plane cannot be reached or refuses."""
        try:
            body: dict[str, Any] = self.request("GET", path, params=params)
        except NotFoundError:
            return None
        return body

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        hold_s: float = 0.0,
    ) -> Any:
        """One request; its JSON answer, or the error to show: ``Unreachable`` (no answer), ``ConfigError`` (401: what
        key to set), ``NotFoundError`` (404, with the plane's message), else the error the body's ``code`` names."""
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        try:
            response = httpx.request(
                method,
                self.url + path,
                params=params,
                json=body,
                headers=headers,
                timeout=httpx.Timeout(self.timeout_s + hold_s, connect=self.timeout_s),
                trust_env=False,
            )
        except httpx.HTTPError as exc:
            if self.kind == URL:
                raise Unreachable(
                    f"cannot reach a flashpoint server at {self.url} ({exc or type(exc).__name__}); check the URL "
                    "(--url or FLASHPOINT_URL), or start one with `flashpoint serve app.py`"
                ) from None
            raise Unreachable(f"{describe(self)} did not answer: {exc or type(exc).__name__}") from None
        if response.status_code == 401:
            raise self._unauthorized()
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.is_success and data is not None:
            return data
        code = data.get("code") if isinstance(data, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        if response.status_code == 404:
            raise NotFoundError(message if isinstance(message, str) else f"{describe(self)}: no {path}")
        if isinstance(code, str) and isinstance(message, str):
            raise error_for(code, message)
        raise Error(
            f"{describe(self)} answered {method} {path} with HTTP {response.status_code}: {response.text[:200]}"
        )

    def _unauthorized(self) -> ConfigError:
        if self.kind == URL:
            said = "refused the API key" if self.key else "needs an API key"
            return ConfigError(
                f"the flashpoint server at {self.url} {said}: set FLASHPOINT_API_KEY (or pass --key) to one of the "
                "keys it was started with"
            )
        return ConfigError(
            f"{describe(self)} refused the key of its announcement {self.file}; the file may be stale: "
            "restart that process, or pass --url and --key"
        )


class Unreachable(Error):
    """A plane does not answer: its process is alive but stuck (or the pid was reused), or nothing listens at --url."""


#: the live plane's kind for each kind of announcement
_KIND_OF = {announce.SERVER: SERVER, announce.DEV: DEV, announce.EMBEDDED: SCRIPT}


def live_planes(settings: Settings) -> list[LivePlane]:
    """The planes announced under ``<state_dir>/run`` whose process is alive, oldest file first.

    Files of processes that are gone (killed before they could clean up) are removed; a file that cannot be trusted
    while its process lives is skipped with a warning that says why (``announce.scan``).
    """
    found, skipped = announce.scan(settings.state_dir)
    for item in skipped:
        print(inert(f"warning: skipped the announcement {item.path}: {item.reason}", lines=False), file=sys.stderr)
    return [
        LivePlane(
            pid=a.announcement.pid,
            url=a.announcement.url,
            key=a.announcement.key,
            file=a.path,
            kind=_KIND_OF[a.announcement.kind],
            app=a.announcement.app,
        )
        for a in found
    ]


def command_of(pid: int) -> str | None:
    """The command line of process ``pid`` (Linux's ``/proc``), shortened for a table; None where unknown."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    parts = [w.decode(errors="replace") for w in words if w]
    if not parts:
        return None
    text = " ".join([os.path.basename(parts[0]), *parts[1:]])
    return text if len(text) <= 60 else text[:57] + "..."


def describe(plane: LivePlane) -> str:
    """Where an answer came from, as the commands print it."""
    if plane.kind == URL:
        return f"flashpoint server at {plane.url}"
    if plane.kind in (SERVER, DEV):
        app = f" {plane.app}" if plane.app else ""
        verb = "serve" if plane.kind == SERVER else "dev"
        return f"flashpoint {verb}{app} (pid {plane.pid}, {plane.url})"
    return f"flashpoint process {plane.pid} ({plane.url})"


def no_plane_message(settings: Settings, more: str = "") -> str:
    """Nothing announced here: say where the CLI looked and what to do (``more``: a command's own way out)."""
    return (
        f"no running flashpoint process found on this machine (announcements in {settings.state_dir / 'run'}); "
        "start a server (`flashpoint serve app.py`) or your script, or pass --url URL (or set FLASHPOINT_URL) for a "
        f"server elsewhere{more}"
    )
