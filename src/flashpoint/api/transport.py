"""The server's HTTP protocol: uvicorn's httptools protocol, with one write per response and a hardened edge.

One write per response: uvicorn's httptools protocol writes a response's head and its body with two
``transport.write`` calls, which is two system calls and two TCP segments for every small JSON answer. Here the head
waits for the body (or for the end of the loop iteration, whichever comes first) and both go out together.
Measured with ``bench/bench_server.py``: writes were the largest share of the server's CPU per job after the event
loop itself, since every job is two HTTP exchanges (the client's, and the worker's result carrying its next job).

The edge (uvicorn has neither): read deadlines and a connection cap, so half-open or half-sent connections cannot hold
the server. A new connection must complete its request's headers within ``header_timeout_s``; on a keep-alive
connection that deadline starts with the first bytes of the next request (idle keep-alive stays uvicorn's
``timeout_keep_alive``). Once the headers are in, the body must arrive within ``body_timeout_s``. On expiry the
connection is answered 408 (when nothing else was sent) and closed. Nothing runs while the app holds a request whose
body has arrived, so long-polls are untouched. At most ``max_connections`` connections are open: a new one past the cap
first closes the oldest connection still waiting for its headers (a slowloris), else it is answered 503 and closed.
The hot path pays no timer: a request that arrives whole in one read arms none (a new connection arms one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections import OrderedDict
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

log = logging.getLogger("flashpoint.api")

#: above this, a body is handed over as a second buffer instead of being copied behind the head
COPY_LIMIT = 64 * 1024


class _Coalescing:
    """A transport that holds a write until the next one (or the next loop iteration) and sends both at once."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._held = None
        if len(data) <= COPY_LIMIT:
            self._transport.write(held + data)
        else:
            self._transport.writelines((held, data))

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def raise_open_file_limit() -> int | None:
    """Raise this process's soft open-file limit (RLIMIT_NOFILE) to its hard limit; the soft limit now in force.

    Every connection is a file: with a 1,024 soft limit, a thousand idle sockets would make the server unable to
    accept, open its database or start a worker. None where the platform has no such limit (Windows).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # e.g. macOS refuses more than OPEN_MAX
            log.debug("open-file limit stays %d (hard limit %s): %s", soft, hard, exc)
            return soft
        log.debug("open-file limit raised from %d to %d", soft, target)
        return target
    log.debug("open-file limit is %s", soft)
    return soft


def default_max_connections(open_files: int | None) -> int:
    """The connection cap for a process that may open ``open_files`` files: at most 4,096, leaving the rest (256, or
    half of a small limit) for the database, workers' pipes and the listening socket."""
    if open_files is None or open_files <= 0:
        return 4096
    return max(1, min(4096, open_files - min(256, open_files // 2)))


def hardened_protocol(
    *, max_connections: int | None = None, header_timeout_s: float | None = None, body_timeout_s: float | None = None
) -> type[CoalescingHttpToolsProtocol]:
    """The protocol every flashpoint server listens with (``uvicorn.Config(http=...)``): this process's open-file limit
    raised (``raise_open_file_limit``), and a connection cap that fits it unless ``max_connections`` is given; None
    keeps a default (``CoalescingHttpToolsProtocol``'s deadlines)."""
    open_files = raise_open_file_limit()
    return CoalescingHttpToolsProtocol.configured(
        max_connections=max_connections or default_max_connections(open_files),
        header_timeout_s=header_timeout_s,
        body_timeout_s=body_timeout_s,
    )


#: where a connection is: between requests (or the app holds a whole request), reading headers, reading a body
_IDLE, _HEAD, _BODY = 0, 1, 2


class _Edge:
    """Per server: connections waiting for their headers, oldest first, and when the cap was last logged."""

    __slots__ = ("waiting", "warned_at")

    def __init__(self) -> None:
        self.waiting: OrderedDict[CoalescingHttpToolsProtocol, None] = OrderedDict()
        self.warned_at = -1e9


_EDGES: weakref.WeakKeyDictionary[ServerState, _Edge] = weakref.WeakKeyDictionary()


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": message, "code": code, "message": message}).encode()
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return (head + "connection: close\r\n\r\n").encode() + body


_TIMEOUT = _answer(408, "Request Timeout", "request_timeout", "the request did not arrive in time; send it whole")
_OVERLOADED = _answer(
    503, "Service Unavailable", "overloaded", "the server has as many connections open as it allows; try again later"
)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a transport that sends a response's head and body in one write, with read
    deadlines and a connection cap (see the module's docstring). ``configured`` makes one with other limits."""

    #: the most open connections per server
    max_connections = 4096
    #: seconds a request's headers may take, from the connection (or the request's first bytes on keep-alive)
    header_timeout_s = 10.0
    #: seconds a request's body may take once its headers are in
    body_timeout_s = 60.0

    @classmethod
    def configured(
        cls, *, max_connections: int | None = None, header_timeout_s: float | None = None,
        body_timeout_s: float | None = None,
    ) -> type[CoalescingHttpToolsProtocol]:  # fmt: skip
        """This protocol with other limits (None keeps the default), for ``uvicorn.Config(http=...)``."""
        limits: dict[str, Any] = {
            "max_connections": cls.max_connections if max_connections is None else max_connections,
            "header_timeout_s": cls.header_timeout_s if header_timeout_s is None else header_timeout_s,
            "body_timeout_s": cls.body_timeout_s if body_timeout_s is None else body_timeout_s,
        }
        for name, value in limits.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        return type(cls.__name__, (cls,), limits)

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        edge = _EDGES.get(server_state)
        if edge is None:
            edge = _EDGES[server_state] = _Edge()
        self._edge = edge
        self._stage = _HEAD
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        full = len(self.connections) >= self.max_connections
        super().connection_made(_Coalescing(transport, self.loop))  # type: ignore[arg-type]
        if full and not self._make_room():
            self._refuse()
            return
        self._wait_for(_HEAD)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # a request is under way and no deadline runs: it is a keep-alive connection's next request, or a body
        if self._stage and self._deadline is None and not self.transport.is_closing():
            self._wait_for(self._stage)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._stage = _HEAD

    def on_headers_complete(self) -> None:
        self._stage = _BODY
        if self._deadline is not None:
            self._stop_deadline()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stage = _IDLE
        if self._deadline is not None:
            self._stop_deadline()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._stage = _IDLE  # the connection belongs to the WebSocket protocol from now on
        self._stop_deadline()
        super().handle_websocket_upgrade()

    # ----------------------------------------------------------------------------------------------------------------

    def _wait_for(self, stage: int) -> None:
        """Start the deadline of ``stage``; one waiting for its headers may be closed to make room for another."""
        timeout = self.header_timeout_s if stage == _HEAD else self.body_timeout_s
        self._deadline = self.loop.call_later(timeout, self._expire)
        if stage == _HEAD:
            self._edge.waiting[self] = None

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._edge.waiting.pop(self, None)

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self.flow.read_paused or (self._stage == _BODY and cycle is not None and cycle.waiting_for_100_continue):
            self._wait_for(self._stage)  # the server holds the bytes back (a pipelined request, a slow reader)
            return
        self._edge.waiting.pop(self, None)
        what = "headers" if self._stage == _HEAD else "body"
        log.debug("closing a connection from %s: its request's %s did not arrive in time", self.client, what)
        if self._stage == _HEAD:  # the late request has no cycle yet; answer unless a response is still going out
            answer = cycle is None or cycle.response_complete
        else:  # the late request is the cycle's: answer unless its app has started its own response
            answer = cycle is not None and not cycle.response_started
            if answer and cycle is not None:
                cycle.disconnected = True  # the app then hears of a disconnect, and its answer is dropped
        if answer:
            self.transport.write(_TIMEOUT)
        self.transport.close()

    def _make_room(self) -> bool:
        """Close the oldest connection still waiting for its headers; False when there is none."""
        waiting = self._edge.waiting
        if not waiting:
            return False
        oldest, _ = waiting.popitem(last=False)
        if oldest._deadline is not None:
            oldest._deadline.cancel()
            oldest._deadline = None
        log.debug("connection cap of %d reached: closing the oldest connection without a request", self.max_connections)
        oldest.transport.close()
        return True

    def _refuse(self) -> None:
        self._stage = _IDLE
        now = time.monotonic()
        if now - self._edge.warned_at > 60:
            self._edge.warned_at = now
            log.warning(
                "refusing connections: %d are open, the most this server allows, and all have sent their request "
                "(raise --max-connections, or the open-file limit, if this is legitimate load)",
                self.max_connections,
            )
        self.transport.write(_OVERLOADED)
        self.transport.close()
