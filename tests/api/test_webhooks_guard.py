"""Webhooks reach public addresses only, unless the operator allows private ones: the address classifier, the intake
check, and deliveries through real aiohttp to a real receiver on 127.0.0.1 (refused, or allowed with the flag)."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from flashpoint.api.webhooks import PublicResolver, WebhookSender, check_webhook_url, private_reason
from flashpoint.config import Settings
from flashpoint.errors import BadInputError, ConfigError
from tests.conftest import Served

NOT_PUBLIC = [
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("169.254.169.254", "link-local"),  # cloud metadata services
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "private"),  # reserved, which Python also counts as private
    ("100.64.0.1", "not globally routable"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "link-local"),
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "172.32.0.1", "2001:4860::8888", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize(("address", "reason"), NOT_PUBLIC)
def test_non_public_addresses_are_classified(address: str, reason: str) -> None:
    assert private_reason(address) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    assert private_reason(address) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "https://LOCALHOST./hook",
        "http://api.localhost:8080/",
        "http://[::1]:8000/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.5/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:80/",
        "http://user:pass@192.168.0.1/",
    ],
)
def test_obviously_private_webhook_urls_are_refused_at_intake_naming_the_flag(url: str) -> None:
    with pytest.raises(BadInputError) as refused:
        check_webhook_url(url, allow_private=False)
    assert refused.value.code == "bad_request"
    assert "--allow-private-webhooks" in str(refused.value)
    check_webhook_url(url, allow_private=True)  # the operator's choice


@pytest.mark.parametrize("url", ["https://hooks.example.com/x", "http://8.8.8.8/hook", "http://[2001:4860::8888]/"])
def test_public_hosts_and_names_pass_intake(url: str) -> None:
    check_webhook_url(url, allow_private=False)  # names are checked again, on their addresses, at delivery


def test_a_webhook_url_without_a_host_is_refused() -> None:
    with pytest.raises(BadInputError, match="no host"):
        check_webhook_url("http:///hook", allow_private=False)


# ----------------------------------------------------------------------------------------------------------------------
# deliveries, through real aiohttp


@dataclass
class Receiver:
    url: str
    port: int
    bodies: list[bytes] = field(default_factory=list)
    types: list[str] = field(default_factory=list)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """An HTTP receiver on 127.0.0.1 that records what is posted to /hook."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    seen = Receiver(f"http://127.0.0.1:{port}/hook", port)

    async def hook(request: web.Request) -> web.Response:
        seen.bodies.append(await request.read())
        seen.types.append(request.headers.get("Content-Type", ""))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield seen
    finally:
        await runner.cleanup()


class StaticNames(AbstractResolver):
    """A name table, as /etc/hosts would give it: maps test names to addresses without asking DNS."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        result: ResolveResult = {
            "hostname": host,
            "host": self.names[host],
            "port": port,
            "family": socket.AF_INET,
            "proto": 0,
            "flags": socket.AI_NUMERICHOST,
        }
        return [result]

    async def close(self) -> None:
        pass


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "flashpoint.webhooks"]


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_a_delivery_to_loopback_is_refused_once_without_retries(
    receiver: Receiver, host: str, caplog: pytest.LogCaptureFixture
) -> None:
    sender = WebhookSender(attempts=3, retry_delay_s=0.01, timeout_s=5)
    caplog.set_level(logging.WARNING, "flashpoint.webhooks")
    try:
        delivered = await sender.deliver(f"http://{host}:{receiver.port}/hook", {"id": "job-1", "status": "COMPLETED"})
    finally:
        await sender.close()
    assert delivered is False and receiver.bodies == []
    [message] = refusals(caplog)  # one warning: a refused destination is not retried
    assert "refused" in message and "job-1" in message and "--allow-private-webhooks" in message


async def test_a_name_that_resolves_to_loopback_is_refused_by_the_resolver(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    resolver = PublicResolver(StaticNames({"hooks.example.com": "127.0.0.1"}))
    sender = WebhookSender(attempts=3, retry_delay_s=0.01, timeout_s=5, resolver=resolver)
    caplog.set_level(logging.WARNING, "flashpoint.webhooks")
    try:
        url = f"http://hooks.example.com:{receiver.port}/hook"
        check_webhook_url(url, allow_private=False)  # a name passes intake...
        delivered = await sender.deliver(url, {"id": "job-2"})  # ...and is refused on the address it resolves to
    finally:
        await sender.close()
    assert delivered is False and receiver.bodies == []
    [message] = refusals(caplog)
    assert "hooks.example.com resolves to 127.0.0.1 (loopback)" in message and "--allow-private-webhooks" in message


async def test_with_the_flag_a_private_receiver_gets_the_body_and_lone_surrogates_survive(receiver: Receiver) -> None:
    sender = WebhookSender(attempts=1, timeout_s=5, allow_private=True)
    body = {"id": "job-3", "status": "COMPLETED", "output": {"text": "caf\u00e9 \ud800 \U0001f680"}}
    try:
        assert await sender.deliver(receiver.url, body) is True
    finally:
        await sender.close()
    [raw] = receiver.bodies
    assert raw.isascii()  # escaped JSON: a lone surrogate cannot be encoded as UTF-8, \ud800 can be sent
    assert json.loads(raw) == body
    assert receiver.types == ["application/json"]


# ----------------------------------------------------------------------------------------------------------------------
# a real server's intake


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_server_refuses_a_private_webhook_at_intake_unless_allowed(serve: Callable[..., Served]) -> None:
    strict = serve()
    with httpx.Client(base_url=strict.url, headers=strict.headers, timeout=30) as client:
        for url in ("http://127.0.0.1:9/hook", "http://localhost/hook", "http://[::ffff:10.0.0.1]/"):
            refused = client.post("/v2/echo/run", json={"input": {"n": 1}, "webhook": url})
            assert refused.status_code == 400, refused.text
            assert refused.json()["code"] == "bad_request" and "--allow-private-webhooks" in refused.json()["error"]
        # a name passes intake (it is checked where it resolves, at delivery); a job that is still running when the
        # server stops is put back in the queue, not ended, so no delivery (and no name lookup) ever happens here
        named = client.post("/v2/slow/run", json={"input": {"seconds": 60}, "webhook": "http://hooks.invalid/x"})
        assert named.status_code == 200 and named.json()["status"] == "IN_QUEUE"
    strict.stop()
    allowed = serve(env={"FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS": "1"})
    with httpx.Client(base_url=allowed.url, headers=allowed.headers, timeout=30) as client:
        accepted = client.post("/v2/echo/run", json={"input": {"n": 1}, "webhook": "http://127.0.0.1:9/hook"})
        assert accepted.status_code == 200, accepted.text


def test_the_allow_flag_reads_from_the_environment() -> None:
    assert Settings.load({}).allow_private_webhooks is False
    assert Settings.load({"FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS": "1"}).allow_private_webhooks is True
    assert Settings.load({"FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS": "0"}).allow_private_webhooks is False
    with pytest.raises(ConfigError, match="FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS must be 1 or 0"):
        Settings.load({"FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS": "maybe"})
