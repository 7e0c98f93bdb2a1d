"""The keyless server's guard (api/loopguard.py): its decision by table (Host, Sec-Fetch-Site, Origin), the JSON
Content-Type rule, the names a server answers to, and the ASGI guard over a real inner app (HTTP, WebSocket, lifespan).
Real servers behind it: tests/hardening/test_keyless.py; a real browser: tests/hardening/test_browser.py."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from flashpoint.api.loopguard import LoopbackGuard, content_type_of, host_names, json_typed, refusal

#: a server bound to 127.0.0.1 that tells its workers it is at http://gpu-box.lan:8000
NAMES = host_names("127.0.0.1", "127.0.0.1", worker_url="http://gpu-box.lan:8000")


def headers(host: str | None = "127.0.0.1:8000", **more: str) -> list[tuple[bytes, bytes]]:
    """ASGI headers: ``host`` (None: none), then ``more`` (``sec_fetch_site`` is ``sec-fetch-site``)."""
    found = [] if host is None else [(b"host", host.encode("latin-1"))]
    return found + [(name.replace("_", "-").encode(), value.encode("latin-1")) for name, value in more.items()]


ALLOWED = [
    ("a program: Host only", headers()),
    ("localhost, no port", headers("localhost")),
    ("any case", headers("LocalHost:8000")),
    ("IPv6 loopback", headers("[::1]:8000")),
    ("IPv6 loopback, no port", headers("[::1]")),
    ("another port (an ssh tunnel)", headers("localhost:9000")),
    ("the workers' URL's host", headers("gpu-box.lan:8000")),
    ("its own dashboard", headers(origin="http://127.0.0.1:8000", sec_fetch_site="same-origin")),
    ("its own origin over https (a local TLS proxy)", headers(origin="https://127.0.0.1:8000")),
    ("a URL typed in the address bar", headers(sec_fetch_site="none")),
    ("origin compared without case", headers("LOCALHOST:8000", origin="http://localhost:8000")),
]


@pytest.mark.parametrize(("case", "given"), ALLOWED, ids=[case for case, _ in ALLOWED])
def test_what_a_keyless_server_serves(case: str, given: list[tuple[bytes, bytes]]) -> None:
    assert refusal(given, NAMES) is None


REFUSED = [
    ("DNS rebinding", headers("attacker.example:8000"), 421, "misdirected_request"),
    ("DNS rebinding, no port", headers("attacker.example"), 421, "misdirected_request"),
    ("a name that starts like localhost", headers("localhost.attacker.example:8000"), 421, "misdirected_request"),
    ("a name that embeds the address", headers("127.0.0.1.nip.io:8000"), 421, "misdirected_request"),
    ("no Host at all", headers(None), 421, "misdirected_request"),
    ("a port that is no number", headers("localhost:80x"), 421, "misdirected_request"),
    ("an empty port", headers("localhost:"), 421, "misdirected_request"),
    ("an unclosed bracket", headers("[::1"), 421, "misdirected_request"),
    ("junk after the bracket", headers("[::1]x"), 421, "misdirected_request"),
    ("rebinding with a cross-site Origin: Host first", headers("evil.example", origin="http://evil.example"), 421,
     "misdirected_request"),
    ("a page of another site", headers(sec_fetch_site="cross-site"), 403, "cross_origin"),
    ("a page of another port of localhost", headers(sec_fetch_site="same-site"), 403, "cross_origin"),
    ("another origin, no Sec-Fetch-Site (older browsers)", headers(origin="http://attacker.example"), 403,
     "cross_origin"),
    ("another port of this machine", headers(origin="http://127.0.0.1:9000"), 403, "cross_origin"),
    ("another name of this machine", headers(origin="http://localhost:8000"), 403, "cross_origin"),
    ("a sandboxed frame or a file page", headers(origin="null"), 403, "cross_origin"),
    ("an origin that only starts like it", headers(origin="http://127.0.0.1:8000.evil"), 403, "cross_origin"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "given", "status", "code"), REFUSED, ids=[case for case, *_ in REFUSED]
)  # fmt: skip
def test_what_a_keyless_server_refuses(case: str, given: list[tuple[bytes, bytes]], status: int, code: str) -> None:
    refused = refusal(given, NAMES)
    assert refused is not None and (refused.status, refused.code) == (status, code)


def test_the_messages_say_why_and_what_to_do() -> None:
    rebound = refusal(headers("attacker.example:8000"), NAMES)
    assert rebound is not None
    assert "'attacker.example:8000'" in rebound.message and "DNS rebinding" in rebound.message
    assert "127.0.0.1, [::1], gpu-box.lan, localhost" in rebound.message and "API key" in rebound.message
    embedded = refusal(headers("attacker.example"), NAMES, "set FLASHPOINT_WORKER_URL")
    assert embedded is not None and embedded.message.endswith("set FLASHPOINT_WORKER_URL")
    page = refusal(headers(origin="http://attacker.example"), NAMES)
    assert page is not None and "Origin: 'http://attacker.example'" in page.message
    assert "another origin" in page.message and "curl" in page.message
    # what a client sent is quoted inert: a terminal escape in it is shown, never acted on
    hostile = refusal(headers("\x1b]52;c;aGk=\x07evil"), NAMES)
    assert hostile is not None and "\x1b" not in hostile.message and "\\x1b]52" in hostile.message


def test_the_names_a_server_answers_to() -> None:
    assert host_names() == {b"localhost", b"127.0.0.1", b"[::1]"}
    assert host_names("::1", "127.0.0.2", worker_url="http://[fd00::5]:8000/") == {
        b"localhost", b"127.0.0.1", b"[::1]", b"127.0.0.2", b"[fd00::5]"
    }  # fmt: skip
    assert host_names("LocalHost", None, worker_url=None) == host_names()


JSON_TYPES = [
    ("application/json", True),
    ("application/json; charset=utf-8", True),
    ("Application/JSON;charset=UTF-8", True),
    (" application/json ", True),
    ("application/vnd.api+json", True),
    (b"application/json", True),
    ("text/plain", False),
    ("text/plain;charset=UTF-8", False),
    ("application/x-www-form-urlencoded", False),
    ("multipart/form-data; boundary=x", False),
    ("application/jsonx", False),
    ("text/json", False),
    ("", False),
    (None, False),
]


@pytest.mark.parametrize(("value", "declared"), JSON_TYPES)
def test_which_content_types_declare_json(value: str | bytes | None, declared: bool) -> None:
    assert json_typed(value) is declared


def test_content_type_of_asgi_headers() -> None:
    assert content_type_of([(b"host", b"x"), (b"content-type", b"text/plain")]) == b"text/plain"
    assert content_type_of([(b"host", b"x")]) is None


# --------------------------------------------------------------------------------------------------------------------
# The ASGI guard


class Inner:
    """The app behind the guard: records what reached it and answers 200."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.seen.append(scope["type"])
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"inner"})


async def call(app: Any, scope: dict[str, Any], incoming: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def http_scope(given: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v2/echo/run", "headers": given, "client": ("127.0.0.1", 5)}


async def test_the_guard_answers_a_refusal_as_json_and_passes_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    inner = Inner()
    guard = LoopbackGuard(inner, NAMES)
    with caplog.at_level(logging.DEBUG, logger="flashpoint.api"):
        sent = await call(guard, http_scope(headers("attacker.example")), [])
        again = await call(guard, http_scope(headers(sec_fetch_site="cross-site")), [])
    assert inner.seen == []
    assert sent[0]["status"] == 421 and (b"content-type", b"application/json") in sent[0]["headers"]
    body = json.loads(sent[1]["body"])
    assert body["code"] == "misdirected_request" and body["error"] == body["message"]
    assert again[0]["status"] == 403 and json.loads(again[1]["body"])["code"] == "cross_origin"
    # one warning a minute: the first refusal shows on a console, the next ones at debug level
    levels = [record.levelno for record in caplog.records if record.message.startswith("refused POST /v2/echo/run")]
    assert levels == [logging.WARNING, logging.DEBUG]
    assert (await call(guard, http_scope(headers()), []))[1]["body"] == b"inner"
    assert inner.seen == ["http"]


async def test_the_guard_closes_a_refused_websocket_and_passes_lifespan() -> None:
    inner = Inner()
    guard = LoopbackGuard(inner, NAMES)
    scope = {"type": "websocket", "path": "/ws", "headers": headers(origin="http://attacker.example")}
    sent = await call(guard, scope, [{"type": "websocket.connect"}])
    assert sent == [{"type": "websocket.close", "code": 1008}] and inner.seen == []
    await call(guard, {"type": "lifespan"}, [])
    assert inner.seen == ["lifespan"]
