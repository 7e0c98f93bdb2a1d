"""Readiness of route workers: when a worker that serves HTTP counts as ready, how often it is asked, and the ask.

A route worker is ready when its ``GET /ping`` answers 200 (Runpod's load-balanced worker contract: 204 while it
initialises), asked with the worker's route secret (flashpoint's route worker answers 403 without it; any other
ignores the header). The plane polls each starting route worker until then: ``verdict`` decides from one answer,
``delay`` says how long to wait before the next, and ``ping`` asks (standard library only: the engine imports no HTTP
client). Queue workers are never polled: they say they are ready by pulling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import Enum

from flashpoint.wire.protocol import ROUTE_SECRET_HEADER

#: asks a worker's ``GET /ping`` at ``address`` (``host:port``) within ``timeout_s``, presenting ``secret`` (the
#: worker's route secret): its status, or None when nothing answered (connection refused, reset or timed out; not HTTP)
Probe = Callable[[str, float, str], Awaitable["int | None"]]

#: the first pause between two asks, and the longest: the pause grows by half each time, so a worker that is up in a
#: few milliseconds is seen at once, and one loading a model for minutes is asked twice a second
FIRST_DELAY_S = 0.02
MAX_DELAY_S = 0.5
#: how long one ask may take (a node that drops packets must not hold the poll)
PROBE_TIMEOUT_S = 2.0
#: how long a route worker may take to answer 200 before it counts as a failed start (model loading can take minutes)
READY_TIMEOUT_S = 600.0


class Verdict(str, Enum):
    """What one answer of ``/ping`` means for a starting worker."""

    #: 200: ready; requests go to it from now on
    READY = "ready"
    #: anything else (204 initialising, nothing listening yet, another status) within the limit: ask again later
    WAIT = "wait"
    #: not ready within the limit: a failed start
    TIMED_OUT = "timed_out"

    def __str__(self) -> str:
        return self.value


def verdict(status: int | None, waited_s: float, limit_s: float) -> Verdict:
    """The verdict on a worker whose ``/ping`` answered ``status`` (None: nothing answered), ``waited_s`` seconds
    after it was started, when it may take ``limit_s``. A late 200 still counts: the worker is ready."""
    if status == 200:
        return Verdict.READY
    if waited_s >= limit_s:
        return Verdict.TIMED_OUT
    return Verdict.WAIT


def delay(asked: int, first_s: float = FIRST_DELAY_S, max_s: float = MAX_DELAY_S) -> float:
    """The pause after the ``asked``-th answer that was not 200 (counted from 0)."""
    return min(first_s * 1.5**asked, max_s)


def describe(status: int | None) -> str:
    """What the last answer was, in words, for the explanation of a worker that never became ready."""
    if status is None:
        return "nothing answered on its port"
    if status == 204:
        return "its /ping still answered 204 (initialising)"
    return f"its /ping answered {status}"


def split_address(address: str) -> tuple[str, int]:
    """``("host", port)`` of ``host:port`` (an IPv6 host in brackets)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def ping(address: str, timeout_s: float = PROBE_TIMEOUT_S, secret: str = "") -> int | None:
    """``GET /ping`` at ``address`` over a fresh connection, with ``secret`` in the route secret's header (none when
    empty): the status, or None when nothing (HTTP) answered in ``timeout_s``."""
    try:
        return await asyncio.wait_for(_ping(address, secret), timeout_s)
    except (OSError, ValueError, asyncio.TimeoutError):
        return None


async def _ping(address: str, secret: str) -> int | None:
    host, port = split_address(address)
    reader, writer = await asyncio.open_connection(host, port)
    presented = b"%s: %s\r\n" % (ROUTE_SECRET_HEADER.encode(), secret.encode("ascii")) if secret else b""
    try:
        writer.write(b"GET /ping HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (address.encode(), presented))
        line = await reader.readline()  # the status line; bounded by the stream's limit (64 KiB)
    finally:
        writer.close()
    parts = line.split(None, 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None
