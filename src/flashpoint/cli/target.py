"""Which control planes a command talks to: ``--url``/``--key`` (``FLASHPOINT_URL``/``FLASHPOINT_API_KEY``) for a
server elsewhere, else every plane announced on this machine; and the look-ups the job commands share.

Every command that talks to a plane takes ``UrlOption`` and ``KeyOption`` and calls ``planes(url, key)``; a command
that acts on one server (secrets, keys, deployments) calls ``one_server(url, key)``, which refuses to pick one of
several.

Edge module: may import anything in flashpoint, plus typer and httpx (through ``cli.live``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Annotated, Any
from urllib.parse import quote

import typer

from flashpoint.cli.live import SERVER, URL, LivePlane, Unreachable, describe, live_planes, no_plane_message
from flashpoint.config import Settings
from flashpoint.errors import ConfigError, NotFoundError
from flashpoint.terminal import inert

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="FLASHPOINT_URL",
        metavar="URL",
        show_default=False,
        help="A flashpoint server elsewhere, e.g. http://10.0.0.5:8000 (default: every flashpoint process running on "
        "this machine, servers and scripts, found through their announcements).",
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="FLASHPOINT_API_KEY",
        metavar="KEY",
        show_default=False,
        help="The API key of the server at --url (of a comma-separated list, the first). Processes on this machine "
        "announce their own.",
    ),
]

#: seconds a completion may wait for a plane: a shell waits on it
COMPLETION_TIMEOUT_S = 1.0


def planes(url: str | None, key: str | None, settings: Settings | None = None) -> list[LivePlane]:
    """The server at ``url`` (with ``key``), or, without a URL, every live plane announced on this machine."""
    if url:
        base = url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ConfigError(
                f"--url (or FLASHPOINT_URL) must be an http(s) URL such as http://127.0.0.1:8000; got {url!r}"
            )
        keys = [part.strip() for part in (key or "").split(",") if part.strip()]
        if not keys:
            # a server of this machine named by its URL: the key of its announcement will do
            announced = [p for p in live_planes(settings or Settings.load()) if p.url == base and p.key]
            keys = [announced[0].key] if announced and announced[0].key else []
        return [LivePlane(None, base, keys[0] if keys else None, kind=URL)]
    return live_planes(settings or Settings.load())


def required_planes(url: str | None, key: str | None, more: str = "") -> list[LivePlane]:
    """As ``planes``, but finding none is an error that says how to start one (``more``: the command's own advice)."""
    settings = Settings.load()
    found = planes(url, key, settings)
    if not found:
        raise NotFoundError(no_plane_message(settings, more))
    return found


def one_server(url: str | None, key: str | None, settings: Settings | None = None) -> LivePlane:
    """The one server a command acts on: the one at ``url`` (with ``key``), else the one ``flashpoint serve`` announced
    on this machine. Scripts' embedded planes and ``flashpoint dev`` are not servers and never count.

    Raises:
        NotFoundError: no ``flashpoint serve`` runs here and no URL was given (the message says how to start one or
            name one).
        ConfigError: several servers run here: they are listed (URL, app, pid) and none is picked; name one with
            ``--url``. Also a ``url`` that is not an http(s) URL.
    """
    settings = settings or Settings.load()
    if url:
        (named,) = planes(url, key, settings)
        return named
    found = live_planes(settings)
    servers = [p for p in found if p.kind == SERVER]
    if len(servers) == 1:
        return servers[0]
    if not servers:
        others = len(found)
        aside = (
            f" ({others} other flashpoint process{'es' if others > 1 else ''} run{'' if others > 1 else 's'} here, "
            "`flashpoint dev` or scripts, which are not servers)"
            if others
            else ""
        )
        raise NotFoundError(
            f"no `flashpoint serve` runs on this machine{aside}: start one (`flashpoint serve`), or name a server with "
            "--url URL (or FLASHPOINT_URL) and --key (or FLASHPOINT_API_KEY)"
        )
    listed = "; ".join(f"{p.url} (serve {p.app or '(no app)'}, pid {p.pid})" for p in servers)
    raise ConfigError(
        f"{len(servers)} flashpoint servers run on this machine: {listed}; pick one with --url URL (or FLASHPOINT_URL)"
    )


def ask(plane: LivePlane, path: str, params: dict[str, str] | None = None, notes: list[str] | None = None) -> Any:
    """GET ``path`` of ``plane``: its JSON, or None on 404. A plane of this machine that does not answer is skipped
    with a warning (into ``notes``, else on stderr); the server named with --url not answering is an error."""
    try:
        return plane.get(path, params)
    except Unreachable as exc:
        if plane.kind == URL:
            raise
        warning = inert(f"warning: {exc}; skipped")  # the error may quote what the plane answered
        if notes is None:
            print(warning, file=sys.stderr)
        else:
            notes.append(warning)
        return None


def seg(text: str) -> str:
    """A path segment, quoted."""
    return quote(text, safe="")


def where(found: list[LivePlane]) -> str:
    """The planes asked, for an error message."""
    if len(found) == 1:
        return describe(found[0])
    return "the flashpoint processes running here (pid " + ", ".join(str(p.pid) for p in found) + ")"


def find_job(found: list[LivePlane], job_id: str) -> tuple[LivePlane, dict[str, Any]]:
    """The plane that holds job ``job_id`` and the job (``GET /v1/jobs/{id}``); ``NotFoundError`` when none does."""
    for plane in found:
        body = ask(plane, f"/v1/jobs/{seg(job_id)}")
        if body is not None:
            return plane, body
    raise NotFoundError(f"no job {job_id!r} in {where(found)}; `flashpoint jobs` lists the jobs")


# ----------------------------------------------------------------------------------------------------------------
# shell completion: what the planes hold, asked briefly; nothing when they cannot say


def _completion_planes(ctx: typer.Context) -> list[LivePlane]:
    url = ctx.params.get("url") or os.environ.get("FLASHPOINT_URL")
    key = ctx.params.get("key") or os.environ.get("FLASHPOINT_API_KEY")
    return [dataclasses.replace(p, timeout_s=COMPLETION_TIMEOUT_S) for p in planes(url, key)]


def complete_job_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Job ids of the planes, newest first, that start with what was typed."""
    try:
        ids: list[str] = []
        for plane in _completion_planes(ctx):
            body = plane.get("/v1/jobs", {"limit": "200"}) or {}
            ids.extend(job["id"] for job in body.get("jobs", []))
        return [i for i in ids if i.startswith(incomplete)]
    except Exception:  # a completion never fails the shell; it offers nothing
        return []


def complete_endpoints(ctx: typer.Context, incomplete: str) -> list[str]:
    """Endpoint names the planes serve that start with what was typed."""
    try:
        names: set[str] = set()
        for plane in _completion_planes(ctx):
            body = plane.get("/v1/endpoints") or {}
            names.update(row["name"] for row in body.get("endpoints", []))
        return sorted(n for n in names if n.startswith(incomplete))
    except Exception:  # a completion never fails the shell; it offers nothing
        return []
