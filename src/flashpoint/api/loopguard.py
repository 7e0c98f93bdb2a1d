"""Loopback is not a trust boundary: the guard in front of a server that asks for no key.

Every browser on the machine reaches ``127.0.0.1``, so a server without a key must tell a request from a local program
(curl, an SDK, a worker, the CLI, its own dashboard) from one a web page makes. Two attacks, two rules:

- **DNS rebinding**: a page of ``attacker.example`` points its own name at ``127.0.0.1`` and then reads this server as
  if it were its own origin. Its requests carry ``Host: attacker.example``, so only a ``Host`` naming this machine is
  served (``localhost``, ``127.0.0.1``, ``[::1]``, the address the server is bound to, the host of the workers' URL),
  on any port (an ssh tunnel may move the port; no page can rebind a loopback name): else ``421``.
- **Cross-site requests** (CSRF): a page of another origin may still send a request (``fetch(..., {mode:
  "no-cors"})``, a form) that the server runs though the page never reads the answer. Browsers say where such a
  request comes from: ``Sec-Fetch-Site: cross-site`` or ``same-site`` (another port of localhost is same-site), or an
  ``Origin`` that is not the server's own (``http(s)://`` + the ``Host`` the request reached): ``403``. Programs send
  neither header; a page the server serves itself (the dashboard) sends ``same-origin`` and its own origin.

``refusal`` is the decision (a pure function of the headers); ``LoopbackGuard`` is the ASGI app that applies it to
every HTTP and WebSocket request before anything else sees it. ``json_typed`` is the third rule, applied by the
routes themselves: a keyless server's own JSON routes refuse a body that is not declared ``application/json`` (``415``),
so that not even an old browser's form or ``text/plain`` post can submit a job.

Edge module (HTTP layer): the standard library only, so an embedded plane's cold start pays nothing for it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

log = logging.getLogger("flashpoint.api")

#: the names of this machine that every keyless server answers to, as a ``Host`` header spells them
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
#: ``415``'s code and message, for every keyless JSON route
UNSUPPORTED_CODE = "unsupported_media_type"
UNSUPPORTED_MESSAGE = (
    "send the body as JSON with the header Content-Type: application/json (e.g. curl -H 'Content-Type: "
    "application/json' -d '{\"input\": {...}}'); a server without an API key refuses other types, which any web page "
    "could send"
)


#: how a keyless server is reached by other names (the end of its ``421``)
KEY_REMEDY = "serve it with an API key (FLASHPOINT_API_KEY or --api-key), which every caller then sends"


class Refusal(NamedTuple):
    """Why a request is refused: its HTTP status, the error's stable code and the message that says what to do."""

    status: int
    code: str
    message: str


def host_names(*names: str | None, worker_url: str | None = None) -> frozenset[bytes]:
    """The ``Host`` names (without a port) a keyless server answers to: loopback's, each of ``names`` given (the host
    asked for, the bound address) and the host of ``worker_url`` (where workers are told to reach the server),
    lowercase, an IPv6 address in brackets."""
    accepted = set(LOOPBACK_NAMES)
    for name in (*names, urlsplit(worker_url).hostname if worker_url else None):
        if name:
            name = name.lower().strip("[]")
            accepted.add(f"[{name}]" if ":" in name else name)
    return frozenset(name.encode() for name in accepted)


def _name_of(host: bytes) -> bytes | None:
    """The name part of a ``Host`` value (lowercase), or None when it is malformed (a port that is not a number)."""
    if host.startswith(b"["):
        end = host.find(b"]")
        if end < 0:
            return None
        name, rest = host[: end + 1], host[end + 1 :]
        if rest and not (rest[:1] == b":" and rest[1:].isdigit()):
            return None
        return name
    name, colon, port = host.partition(b":")
    if colon and not port.isdigit():
        return None
    return name


def refusal(
    headers: Iterable[tuple[bytes, bytes]], names: frozenset[bytes], remedy: str = KEY_REMEDY
) -> Refusal | None:
    """None when a keyless server may serve a request with these headers (ASGI's lowercase names); else why not.

    ``names``: what ``host_names`` gives; ``remedy``: how to serve other names (the end of the ``421``'s message).
    Rules, in order: ``Host`` must name this machine (``421``); ``Sec-Fetch-Site`` must not be ``cross-site`` or
    ``same-site``, and an ``Origin`` must be the server's own (``403``).
    """
    host = origin = site = None
    for key, value in headers:
        if key == b"host":
            host = value.lower()
        elif key == b"origin":
            origin = value.lower()
        elif key == b"sec-fetch-site":
            site = value
    if host is None:
        return Refusal(
            421, "misdirected_request", f"the request has no Host header; send Host: 127.0.0.1:PORT (it names one of "
            f"{_listed(names)}), as every HTTP/1.1 client does",
        )  # fmt: skip
    if _name_of(host) not in names:
        return Refusal(
            421,
            "misdirected_request",
            f"this flashpoint server answers only requests addressed to this machine by {_listed(names)}, not to "
            f"{_shown(host)}: a web page may have pointed its own name at this machine (DNS rebinding) to read it. "
            f"Call it by one of those names; to reach it by another, {remedy}",
        )
    if site is not None and site.lower() in (b"cross-site", b"same-site"):
        return Refusal(403, "cross_origin", _cross_origin(f"Sec-Fetch-Site: {_shown(site)}"))
    if origin is not None and not (origin == b"http://" + host or origin == b"https://" + host):
        return Refusal(403, "cross_origin", _cross_origin(f"Origin: {_shown(origin)}"))
    return None


def _listed(names: frozenset[bytes]) -> str:
    return ", ".join(sorted(name.decode("latin-1") for name in names))


def _shown(value: bytes) -> str:
    """A header's value as a message quotes it: at most 200 characters, control characters escaped."""
    return repr(value.decode("latin-1")[:200])


def _cross_origin(evidence: str) -> str:
    return (
        f"a web page of another origin ({evidence}) may not call this flashpoint server, which would run jobs and "
        "show their results to it as if it were you; call it from a program (curl, the SDK, the runpod client) or "
        "from the dashboard it serves"
    )


def json_typed(content_type: bytes | str | None) -> bool:
    """Whether a ``Content-Type`` declares JSON: ``application/json`` or ``application/*+json``, parameters (e.g.
    ``; charset=utf-8``) allowed, any case."""
    if content_type is None:
        return False
    raw = content_type.encode("latin-1") if isinstance(content_type, str) else content_type
    media = raw.partition(b";")[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def content_type_of(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The ``Content-Type`` of ASGI headers, or None."""
    for key, value in headers:
        if key == b"content-type":
            return value
    return None


def _body(refused: Refusal) -> bytes:
    return json.dumps({"error": refused.message, "code": refused.code, "message": refused.message}).encode()


class LoopbackGuard:
    """The ASGI app in front of a keyless server's own (``app``; ``names`` and ``remedy`` as ``refusal`` takes them).
    A request ``refusal`` refuses is answered with its JSON error (a WebSocket is closed before it opens, which the
    server answers ``403``) and logged, one warning a minute at most (the rest at debug level), so that a console
    shows that a page tried."""

    __slots__ = ("_app", "_names", "_remedy", "_warned_at")

    def __init__(self, app: Any, names: frozenset[bytes], remedy: str = KEY_REMEDY) -> None:
        self._app = app
        self._names = names
        self._remedy = remedy
        self._warned_at = -1e9

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._app(scope, receive, send)
            return
        refused = refusal(scope["headers"], self._names, self._remedy)
        if refused is None:
            await self._app(scope, receive, send)
            return
        self._log(scope, refused)
        if kind == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        body = _body(refused)
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": refused.status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    def _log(self, scope: Any, refused: Refusal) -> None:
        now = time.monotonic()
        level = logging.DEBUG
        if now - self._warned_at > 60:
            self._warned_at, level = now, logging.WARNING
        client = scope.get("client")
        who = f"{client[0]}:{client[1]}" if client else "a client"
        method = scope.get("method", "WEBSOCKET")
        path = repr(str(scope.get("path", ""))[:200])[1:-1]  # client text: control characters escaped
        log.log(level, "refused %s %s from %s (%d %s): %s", method, path, who, refused.status, refused.code,
                refused.message)  # fmt: skip
