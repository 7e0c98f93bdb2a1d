"""The route proxy's client to workers: pooled HTTP/1.1 connections with httptools' response parser.

Why not aiohttp (which this replaced): a proxied no-op request cost the server about 150 us of CPU in aiohttp's
client (request and response objects, auto headers, a timer per read, ``StreamReader``) against about 45 us here, and
on a machine whose cores the server shares with its workers, the proxy's CPU is throughput lost
(``bench/bench_routes.py``). What a proxy needs is small: write a request whose head it already holds as bytes, parse
an answer, hand its body on as it arrives, keep the connection for the next request.

One ``Exchange`` is one request on one connection: ``send`` writes the request in one ``transport.write``, ``head``
waits for the answer's status and headers, ``read`` returns the body's next piece (``b""`` at its end), ``release``
gives the connection back to its pool when the answer was read to its end and both sides keep it alive (else closes
it). An answer that arrives whole in one read is whole when ``head`` returns: ``read`` then never waits.

Deadlines: connecting ``connect_timeout_s``; every wait for the worker (the head, each later piece) ``read_timeout_s``,
one timer per wait, none when the data is already there. A worker that closes the connection or sends what is not
HTTP before the answer's end raises ``WorkerLost``; one whose answer head (status line and headers) passes
``MAX_HEAD_BYTES`` raises ``BadAnswer`` (a ``WorkerLost``) and its connection is closed, so an endless head costs the
server 64 KiB, not its memory; a deadline raises ``WorkerTimeout``. The head is one wait: bytes trickling in do not
extend it, so a head takes at most ``read_timeout_s``. Backpressure: past ``HIGH_WATER`` bytes read and not yet taken,
the connection stops reading from the worker until they are.

Idle connections are kept per worker address, newest first, for ``IDLE_S`` seconds, below the route worker's own
keep-alive (``worker/routeserver.py``), so a worker never closes a connection the pool is about to reuse; a connection
the worker closed (it stopped) leaves the pool when the close arrives. Nothing is retried: a request is written once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import cast

import httptools

from flashpoint.api.transport import COPY_LIMIT

#: seconds an idle connection stays pooled; below the route worker's keep-alive (``routeserver.KEEP_ALIVE_S``)
IDLE_S = 30.0
#: idle connections kept per worker address (more are closed when released)
MAX_IDLE = 256
#: bytes of an answer read and not yet taken, past which reading from the worker pauses
HIGH_WATER = 256 * 1024
#: the largest answer head (status line and headers) taken from a worker; past it the answer is a ``BadAnswer``
MAX_HEAD_BYTES = 64 * 1024


class WorkerLost(Exception):
    """The worker closed the connection, refused it, or answered with something that is not HTTP."""


class BadAnswer(WorkerLost):
    """The worker's answer cannot be taken (its head passed ``MAX_HEAD_BYTES``); its connection is closed."""


class WorkerTimeout(Exception):
    """The worker did not answer (or send the answer's next piece) within the read deadline."""


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(WorkerTimeout())


class _Connection(asyncio.Protocol):
    """One kept-alive connection to a worker, parsing what it sends; an ``Exchange`` drives it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        #: bytes of the head: received while it was incomplete, and of its headers as parsed (each bounded apart:
        #: the read that completes a head may carry body too, and a header the parser still assembles is not parsed)
        self.head_received = 0
        self.head_parsed = 0
        #: the answer's Content-Length; whether it is chunked (neither: its body ends when the worker closes)
        self.length: int | None = None
        self.chunked = False
        #: the answer to a HEAD request: no body follows its head, whatever its headers say
        self.head_only = False
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.head_done = False
        self.complete = False
        self.paused = False
        self.failure: BaseException | None = None
        self.keep = True

    # asyncio.Protocol -----------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:  # a BadAnswer a callback raised is the failure already
            self._fail(WorkerLost(f"the worker's answer is not HTTP ({exc})"))
            assert self.transport is not None
            self.transport.close()
            return
        if not self.head_done:
            self.head_received += len(data)
            if self.head_received > MAX_HEAD_BYTES:
                self._head_too_large()

    def _head_too_large(self) -> None:
        self._fail(BadAnswer(f"its answer's head passed {MAX_HEAD_BYTES // 1024} KiB"))
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.head_done and exc is None and self.length is None and not self.chunked and not self.complete:
            self.complete = True  # an answer without framing ends when its sender closes (never kept alive)
            self._wake()
        if not self.complete:
            self._fail(WorkerLost(f"the worker closed the connection ({exc!r})" if exc else "the worker hung up"))

    # httptools callbacks --------------------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_parsed += len(name) + len(value) + 4
        if self.head_parsed > MAX_HEAD_BYTES:
            self._head_too_large()
            raise BadAnswer("head too large")  # stops the parser (feed_data raises)
        self.headers.append((name, value))
        if len(name) in (14, 17):  # the two framing headers
            lowered = name.lower()
            if lowered == b"content-length" and value.strip().isdigit():
                self.length = int(value)
            elif lowered == b"transfer-encoding" and b"chunked" in value.lower():
                self.chunked = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True
        self.keep = self.parser.should_keep_alive()  # known here; after the message's end the parser is reset
        if self.head_only:
            # no body follows, but the parser would wait for the one Content-Length announces: the answer is whole,
            # and the connection, its parser mid-message, is not reused
            self.complete = True
            self.keep = False
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # ------------------------------------------------------------------------------------------------------------------

    def _fail(self, failure: BaseException) -> None:
        if self.failure is None:
            self.failure = failure
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until the worker sends something more (or fails, or the deadline passes)."""
        waiter = self.waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None


class Exchange:
    """One request to a worker on one connection (see the module's docstring)."""

    __slots__ = ("_conn", "_pool", "_timeout", "address")

    def __init__(self, pool: Upstream, address: str, conn: _Connection, read_timeout_s: float) -> None:
        self._pool = pool
        self._conn = conn
        self._timeout = read_timeout_s
        self.address = address

    def send(self, head: bytes, body: bytes | None, *, head_only: bool = False) -> None:
        """Write the request (its head, with the framing headers, and its body) in one write; ``head_only`` for a HEAD
        request, whose answer has no body."""
        self._conn.head_only = head_only
        transport = self._conn.transport
        if transport is None:
            raise WorkerLost("the worker closed the connection before the request was written")
        if not body:
            transport.write(head)
        elif len(body) <= COPY_LIMIT:
            transport.write(head + body)
        else:
            transport.writelines((head, body))

    async def head(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The answer's status and headers, as the worker sent them."""
        conn = self._conn
        while not conn.head_done:
            if conn.failure is not None:
                raise conn.failure
            await conn.wait(self._timeout)
        return conn.status, conn.headers

    @property
    def complete(self) -> bool:
        """The whole answer has arrived (what ``read`` returns then never waits)."""
        return self._conn.complete

    @property
    def done(self) -> bool:
        """The whole answer has arrived and been read."""
        return self._conn.complete and not self._conn.chunks

    @property
    def length(self) -> int | None:
        """The answer's Content-Length, when it sent one."""
        return self._conn.length

    async def read(self) -> bytes:
        """The body's next piece, as it arrived (pieces that arrived together, joined); ``b""`` once it has ended."""
        conn = self._conn
        while not conn.chunks:
            if conn.complete:
                return b""
            if conn.failure is not None:
                raise conn.failure
            await conn.wait(self._timeout)
        chunks = conn.chunks
        piece = chunks.popleft() if len(chunks) == 1 else b"".join(_drain(chunks))
        conn.buffered = 0
        if conn.paused and conn.transport is not None:
            conn.paused = False
            conn.transport.resume_reading()
        return piece

    def release(self) -> None:
        """Give the connection back (read to its end and kept alive by the worker), else close it."""
        self._pool._give_back(self.address, self._conn)


def _drain(chunks: deque[bytes]) -> list[bytes]:
    taken = list(chunks)
    chunks.clear()
    return taken


class Upstream:
    """Pooled connections to workers, per address ``host:port``; one per server, used on its loop."""

    def __init__(self, *, connect_timeout_s: float, idle_s: float = IDLE_S) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.idle_s = idle_s
        self._idle: dict[str, deque[_Connection]] = {}
        #: connections opened since start (tests read it to see reuse)
        self.opened = 0

    async def exchange(self, address: str, read_timeout_s: float) -> Exchange:
        """A connection to ``address``, pooled or new, ready for one request."""
        conn = self._pooled(address)
        if conn is None:
            conn = await self._connect(address)
        return Exchange(self, address, conn, read_timeout_s)

    def _pooled(self, address: str) -> _Connection | None:
        idle = self._idle.get(address)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # newest first: the oldest age out
            if conn.transport is not None and not conn.transport.is_closing() and now - conn.idle_since < self.idle_s:
                return conn
            if conn.transport is not None:
                conn.transport.close()
        return None

    async def _connect(self, address: str) -> _Connection:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop), host.strip("[]"), int(port)),
                self.connect_timeout_s,
            )
        except asyncio.TimeoutError:
            raise WorkerLost(f"no connection to {address} within {self.connect_timeout_s:g}s") from None
        except OSError as exc:
            raise WorkerLost(f"cannot connect to {address} ({exc.strerror or exc})") from None
        self.opened += 1
        return conn

    def _give_back(self, address: str, conn: _Connection) -> None:
        transport = conn.transport
        if transport is None:
            return
        if not (conn.complete and conn.keep and not conn.chunks and conn.failure is None):
            transport.close()
            return
        idle = self._idle.setdefault(address, deque())
        if len(idle) >= MAX_IDLE or transport.is_closing():
            transport.close()
            return
        conn._reset()
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def close(self) -> None:
        """Close every idle connection (at server shutdown; connections in use close when their exchange ends)."""
        for idle in self._idle.values():
            for conn in idle:
                if conn.transport is not None:
                    conn.transport.close()
        self._idle.clear()
