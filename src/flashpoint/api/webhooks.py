"""Webhooks: on a terminal state, POST the job's /status body to its ``webhook`` URL (two retries, 10 s apart).

Any API key holder chooses the URL, so by default the server posts only to public internet addresses: never to
loopback, link-local, private, unspecified, multicast or reserved ones (IPv4 and IPv6, IPv4-mapped IPv6 included),
unless it runs with ``--allow-private-webhooks``. Obviously private hosts (``localhost``, private IP literals) are
refused at intake (``check_webhook_url``); every delivery checks the addresses it really connects to, through a
resolver that drops non-public results, so a name that resolves to a private address (or starts to: DNS rebinding)
reaches nothing. Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from flashpoint.errors import BadInputError
from flashpoint.jobs import JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.wire import codec

log = logging.getLogger("flashpoint.webhooks")

#: how an operator lets webhooks reach private networks
ALLOW_HINT = "start the server with --allow-private-webhooks (FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS=1) to allow it"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def private_reason(address: str | Address) -> str | None:
    """Why ``address`` is no public internet address ("loopback", "private", ...), or None when it is one."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    checks = (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("not globally routable", not ip.is_global),  # e.g. 100.64.0.0/10, shared by carrier-grade NAT
    )
    return next((reason for reason, hit in checks if hit), None)


def _literal_reason(host: str) -> str | None:
    """Why ``host`` (a URL's host) is obviously private without asking DNS, or None."""
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return "loopback"
    try:
        return private_reason(host)
    except ValueError:  # a name: checked on the addresses it resolves to, at delivery
        return None


def check_webhook_url(url: str, allow_private: bool) -> None:
    """At intake: refuse a webhook URL whose host is obviously private (``localhost``, a private IP literal) with
    ``BadInputError`` (400 ``bad_request``), unless ``allow_private``. Names are checked again at delivery."""
    if allow_private:
        return
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        raise BadInputError(f'"webhook" is not a valid URL ({exc}): {url!r}', code="bad_request") from None
    if not host:
        raise BadInputError(f'"webhook" has no host: {url!r}; e.g. https://example.com/hook', code="bad_request")
    reason = _literal_reason(host)
    if reason is not None:
        raise BadInputError(
            f'"webhook" {url!r} points at a {reason} address; this server posts webhooks to public addresses only, '
            f"since any API key holder chooses the URL: {ALLOW_HINT}",
            code="bad_request",
        )


class PrivateAddressError(OSError):
    """A webhook's host is, or resolves only to, addresses that are not public."""


class PublicResolver(AbstractResolver):
    """A resolver that keeps only public addresses of a name (aiohttp connects to exactly what it returns)."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        public = [r for r in results if private_reason(r["host"]) is None]
        if not public:
            found = ", ".join(sorted({f"{r['host']} ({private_reason(r['host'])})" for r in results})) or "nothing"
            raise PrivateAddressError(f"{host} resolves to {found}, no public address")
        return public

    async def close(self) -> None:
        await self._inner.close()


class WebhookSender:
    """POSTs bodies with retries; refuses non-public destinations unless ``allow_private``."""

    def __init__(
        self,
        *,
        attempts: int = 3,
        retry_delay_s: float = 10.0,
        timeout_s: float = 10.0,
        allow_private: bool = False,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self.timeout_s = timeout_s
        self.allow_private = allow_private
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            resolver = self._resolver
            if resolver is None and not self.allow_private:
                resolver = PublicResolver()
            connector = aiohttp.TCPConnector(resolver=resolver) if resolver is not None else aiohttp.TCPConnector()
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    async def deliver(self, url: str, body: dict[str, Any]) -> bool:
        """Post ``body`` to ``url`` until a 2xx, at most ``attempts`` times; whether it was delivered.

        The body is ``codec.json_bytes``: strings holding lone UTF-16 surrogates survive as escapes.
        """
        payload = codec.json_bytes(body)
        job = body.get("id")
        for attempt in range(1, self.attempts + 1):
            try:
                if not self.allow_private:
                    reason = _literal_reason(urlsplit(url).hostname or "")
                    if reason is not None:  # aiohttp asks no resolver about an IP literal
                        raise PrivateAddressError(f"{urlsplit(url).hostname} is a {reason} address")
                session = self._open()
                headers = {"Content-Type": "application/json"}
                async with session.post(url, data=payload, headers=headers, allow_redirects=False) as response:
                    status = response.status
                if status < 300:
                    return True
                problem = f"answered {status}"
            except (aiohttp.ClientError, PrivateAddressError, asyncio.TimeoutError, ValueError) as exc:
                refused = exc if isinstance(exc, PrivateAddressError) else getattr(exc, "os_error", None)
                if isinstance(refused, PrivateAddressError):
                    log.warning("webhook for job %s to %s refused: %s; %s", job, url, refused, ALLOW_HINT)
                    return False
                problem = f"{type(exc).__name__}: {exc}"
            log.warning("webhook for job %s to %s %s (attempt %d of %d)", job, url, problem, attempt, self.attempts)
            if attempt < self.attempts:
                await asyncio.sleep(self.retry_delay_s)
        return False

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class Webhooks:
    """Listens to the plane; each delivery is a task, so a slow receiver never holds the plane up."""

    def __init__(
        self,
        plane: ControlPlane,
        *,
        attempts: int = 3,
        retry_delay_s: float = 10.0,
        timeout_s: float = 10.0,
        allow_private: bool = False,
    ) -> None:
        self.plane = plane
        self.timeout_s = timeout_s
        self.sender = WebhookSender(
            attempts=attempts, retry_delay_s=retry_delay_s, timeout_s=timeout_s, allow_private=allow_private
        )
        self._tasks: set[asyncio.Task[bool]] = set()
        plane.listen(self.on_terminal)

    def on_terminal(self, view: JobView) -> None:
        if view.webhook is None:
            return
        task = asyncio.get_running_loop().create_task(self.sender.deliver(view.webhook, view.to_json()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Finish deliveries in flight for up to one timeout, then drop the rest."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.timeout_s)
            for task in self._tasks:
                task.cancel()
        await self.sender.close()
