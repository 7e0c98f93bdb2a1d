"""The server's proxy to HTTP-route endpoints: ``METHOD /{endpoint}/{path}`` goes to a ready worker of that endpoint.

Edge module: Starlette's request types, and ``api/upstream.py``'s pooled HTTP/1.1 client to workers (a third of
aiohttp's CPU per proxied request, which on cores shared with the workers is throughput); it reaches the plane through
its route verbs only (``take_route_worker``, ``hold_route_worker``, ``release_route_worker``, ``routed``).

One request, in order: the key (401; a key that may not ``INVOKE`` the endpoint: 403, or for one it may not see the
404 of a path no endpoint has, ``api/guard.py``; the key is never forwarded), the body, read whole up to the server's
limit (413 ``payload_too_large`` before anything is forwarded), a worker (the one with the fewest requests in flight;
with none ready, the request is held, which is demand: a worker starts, up to the wait bound, then 503 ``no_worker``
with the endpoint's explanation; an endpoint that can never run on this fleet answers 503 at once), the exchange with
the worker (method, path below the endpoint's name, query, body and headers, less hop-by-hop ones, the server's
``Authorization`` and every client-sent ``X-Forwarded-*``, ``Forwarded`` and route-secret header, plus the proxy's own
``X-Forwarded-*`` and the worker's route secret, ``protocol.ROUTE_SECRET_HEADER``: flashpoint's route worker answers
nothing without it), and the answer streamed back as it arrives (every chunk is sent on when
read: a chunked or SSE answer is never buffered). A worker that fails before its answer began is 502 ``worker_lost``
(504 ``worker_timeout`` past the read deadline); after, the client's connection is closed mid-answer, since a status
already sent cannot change. An answer head over ``upstream.MAX_HEAD_BYTES`` (64 KiB) is 502 ``bad_worker_answer``,
and that connection is closed. The plane learns of a lost worker by its exit, as for any worker.

Deadlines: connecting to a worker ``CONNECT_TIMEOUT_S``; each read from it (its answer's head, then every gap between
two chunks) the endpoint's ``execution_timeout_ms``, or ``READ_TIMEOUT_S`` when it has none. The client's own reads are
the server's (``api/transport.py``). One ``Upstream`` per server keeps connections to workers alive.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Receive, Scope, Send

from flashpoint.access import ALLOW, Forbidden, Operation, decide_endpoint
from flashpoint.api.guard import UNAUTHORIZED, app_env_of, caller_worker, key_state, principal_of, sees_endpoint
from flashpoint.api.runpod import CALLER_REFUSED
from flashpoint.api.upstream import BadAnswer, Exchange, Upstream, WorkerLost, WorkerTimeout
from flashpoint.explain import Explanation
from flashpoint.scheduler.draining import STOPPING
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.spec import ROUTE_METHODS, RouteSpec
from flashpoint.wire import codec, protocol

if TYPE_CHECKING:
    from flashpoint.api.metrics import RouteMetrics

log = logging.getLogger("flashpoint.api")

#: seconds to connect to a worker (a refused connection fails at once; this bounds a node that drops packets)
CONNECT_TIMEOUT_S = 10.0
#: seconds a worker may take for its answer's head, and between two chunks, when its endpoint sets no
#: execution_timeout_ms
READ_TIMEOUT_S = 600.0
#: hop-by-hop headers (RFC 9110 7.6.1): they belong to one connection and are never forwarded either way
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection", b"te",
     b"trailer", b"transfer-encoding", b"upgrade"}
)  # fmt: skip
#: the request header holding a worker's route secret
_SECRET = protocol.ROUTE_SECRET_HEADER.encode()
#: request headers not forwarded: hop-by-hop ones, the server's key, and what the proxy sets itself (the worker's host,
#: the body's length, ``forwarded`` and the route secret; ``expect``: the body was read already); every
#: ``x-forwarded-*`` header a client sent is dropped too (``_FORWARDED``), so the worker sees only the proxy's own
_DROP_REQUEST = HOP_BY_HOP | {b"authorization", b"host", b"content-length", b"expect", b"forwarded", _SECRET}
_FORWARDED = b"x-forwarded-"
#: answer headers not passed back: hop-by-hop ones, and what the server sets itself
_DROP_RESPONSE = HOP_BY_HOP | {b"date", b"server"}
#: methods that label metrics as themselves (anything else is "other")
_METHODS = frozenset({*ROUTE_METHODS, "HEAD", "OPTIONS"})
#: the route label of a request that matches no declared route (bounds the metrics' label values)
OTHER = "other"


class _TooLarge(Exception):
    pass


def route_pattern(path: str) -> re.Pattern[str]:
    """A route template as a regular expression: ``{name}`` (and ``{name:int}``...) is one path segment,
    ``{name:path}`` the rest of the path (Starlette's converters, which Flash's FastAPI routes use)."""
    parts: list[str] = []
    last = 0
    for match in re.finditer(r"{([^{}:]+)(?::([^{}]+))?}", path):
        parts.append(re.escape(path[last : match.start()]))
        parts.append(".*" if match.group(2) == "path" else "[^/]+")
        last = match.end()
    parts.append(re.escape(path[last:]))
    return re.compile("".join(parts))


def route_matcher(routes: Sequence[RouteSpec]) -> Callable[[str, str], str]:
    """``match(method, path)``: the declared template a request matches (the first, in declaration order), else
    ``"other"``; the metrics' route label."""
    compiled = [(route.method, route_pattern(route.path), route.path) for route in routes]

    def match(method: str, path: str) -> str:
        for wanted, pattern, template in compiled:
            if wanted == method and pattern.fullmatch(path):
                return template
        return OTHER

    return match


def _segment(scope: Scope) -> bytes:
    """The first segment of a request's path as the client wrote it (the endpoint's id or bare name): the prefix the
    worker's app is mounted under (``X-Forwarded-Prefix``)."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    cut = raw.find(b"/", 1)
    return raw[1:cut] if cut > 0 else raw[1:]


def _error(code: str, message: str, status: int, **details: Any) -> tuple[int, bytes]:
    return status, codec.json_bytes({"error": message, "code": code, "message": message, **details})


async def _answer(send: Send, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _until_disconnect(receive: Receive) -> None:
    """Return once the client hangs up (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class RouteProxy:
    """Forwards requests under ``/{endpoint}/`` to the workers of route endpoints; one per server."""

    def __init__(
        self,
        plane: ControlPlane,
        api_keys: tuple[str, ...],
        *,
        max_body_bytes: int,
        wait_s: float,
        metrics: RouteMetrics | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        state: Any = None,
    ) -> None:
        self.plane = plane
        #: where the keys are read at each request (``api/guard.py``): the FastAPI app's state, or ``api_keys``
        self.state = key_state(api_keys) if state is None else state
        if getattr(self.state, "plane", None) is None:
            self.state.plane = plane
        self.max_body_bytes = max_body_bytes
        #: how long a request waits for a ready worker before it is answered 503 with the explanation
        self.wait_s = wait_s
        self.metrics = metrics
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        #: pooled connections to workers
        self.upstream = Upstream(connect_timeout_s=connect_timeout_s)
        #: per endpoint: its routes (to see when they change) and their matcher
        self._matchers: dict[str, tuple[tuple[RouteSpec, ...], Callable[[str, str], str]]] = {}

    def endpoint_of(self, path: str) -> EndpointState | None:
        """The route endpoint a request path names (its first segment: an id, or a bare name one route endpoint
        alone has), or None."""
        end = path.find("/", 1)
        segment = path[1:end] if end > 0 else path[1:]
        found = self.plane.routed.get(segment)
        if found is None and segment and "." not in segment:
            named = [ep for ep in self.plane.routed.values() if ep.spec.name == segment]
            found = named[0] if len(named) == 1 else None
        return found

    def ambiguous(self, path: str) -> list[str]:
        """The ids of the route endpoints a bare first segment could mean, when several have that name."""
        end = path.find("/", 1)
        segment = path[1:end] if end > 0 else path[1:]
        if not segment or "." in segment or segment in self.plane.routed:
            return []
        ids = sorted(ep.spec.key for ep in self.plane.routed.values() if ep.spec.name == segment)
        return ids if len(ids) > 1 else []

    async def serve_named(self, ids: list[str], scope: Scope, receive: Receive, send: Send) -> None:
        """A bare name several route endpoints have (``ambiguous``): the one of them the key sees is served; several
        are 409 naming the ids it sees; none is the 404 of a path no endpoint serves."""
        try:
            who = principal_of(Request(scope), self.state)
        except HTTPException:
            await _answer(send, *_error("unauthorized", UNAUTHORIZED, 401), [(b"www-authenticate", b"Bearer")])
            return
        seen = [key for key in ids if sees_endpoint(who, key)]
        if len(seen) == 1:
            await self.serve(self.plane.routed[seen[0]], scope, receive, send)
            return
        if not seen:
            await _answer(send, *_error("not_found", f"no route {scope.get('method', '')} {scope['path']}", 404))
            return
        name = self.plane.routed[seen[0]].spec.name
        message = (
            f"route endpoint {name!r} is deployed in several apps: {', '.join(seen)}; call it by id, e.g. /{seen[0]}/"
        )
        await _answer(send, *_error("conflict", message, 409))

    async def close(self) -> None:
        """Close the pooled connections to workers (at server shutdown)."""
        self.upstream.close()

    # ----------------------------------------------------------------------------------------------------------------
    # one request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ep = self.endpoint_of(scope["path"])
        if ep is None:  # served only for paths endpoint_of names; a stale one (never happens) gets a JSON 404
            status, body = _error("not_found", f"no route endpoint at {scope['path']}", 404)
            await _answer(send, status, body)
            return
        await self.serve(ep, scope, receive, send)

    async def serve(self, ep: EndpointState, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request under ``/{ep}/``, and count it in the route metrics."""
        began = time.perf_counter()
        status = 0
        try:
            status = await self._serve(ep, scope, receive, send, began)
        finally:
            if self.metrics is not None:
                self._observe(ep, scope, status, time.perf_counter() - began)

    def _observe(self, ep: EndpointState, scope: Scope, status: int, seconds: float) -> None:
        assert self.metrics is not None
        name = ep.spec.key
        known = self._matchers.get(name)
        if known is None or known[0] is not ep.spec.routes:
            known = self._matchers[name] = (ep.spec.routes, route_matcher(ep.spec.routes))
        method = scope["method"]
        path = scope["path"]
        end = path.find("/", 1)
        route = known[1](method, path[end:] if end > 0 else "/")
        self.metrics.observe(name, method if method in _METHODS else OTHER, route, status, seconds)

    async def _serve(self, ep: EndpointState, scope: Scope, receive: Receive, send: Send, began: float) -> int:
        """The status answered (0: the connection was closed mid-answer); ``began``: when the request arrived
        (``perf_counter``), for the time the plane's latency target reads."""
        forwarded: list[bytes] = []  # header lines, as they go to the worker
        length = host = None
        for name, value in scope["headers"]:
            if name in _DROP_REQUEST:
                if name == b"content-length":
                    length = value
                elif name == b"host":
                    host = value
                continue
            if name.startswith(_FORWARDED):  # a client's claim of where it came from, replaced by the proxy's own
                continue
            forwarded.append(b"%s: %s\r\n" % (name, value))
        refused = self._refused(ep, scope)
        if refused is not None:
            status, body = refused
            await _answer(send, status, body, [(b"www-authenticate", b"Bearer")] if status == 401 else [])
            return status
        if self.plane.draining:  # the server is stopping: requests in flight finish, new ones are refused
            status, body = _error("backend_error", STOPPING, 503)
            await _answer(send, status, body)
            return status
        try:
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                raise _TooLarge
            content = await self._read_body(receive)
        except _TooLarge:
            message = (
                f"request body is larger than the limit of {self.max_body_bytes} bytes; send less, or raise "
                "--max-body-mb"
            )
            status, body = _error("payload_too_large", message, 413)
            await _answer(send, status, body)
            return status
        worker = self.plane.take_route_worker(ep)
        if worker is None:
            found = await self._hold(ep, receive)
            if isinstance(found, Explanation):
                status, body = self._no_worker(ep, found)
                await _answer(send, status, body)
                return status
            worker = found
        client = scope.get("client")
        forwarded.append(
            b"x-forwarded-for: %s\r\nx-forwarded-proto: %s\r\nx-forwarded-prefix: /%s\r\n"
            % ((client[0] if client else "").encode(), scope.get("scheme", "http").encode(), _segment(scope))
        )
        if host is not None:
            forwarded.append(b"x-forwarded-host: %s\r\n" % host)
        forwarded.append(b"%s: %s\r\n" % (_SECRET, self.plane.route_secret(worker).encode()))
        try:
            return await self._forward(ep, worker, scope, receive, send, forwarded, content)
        finally:
            self.plane.release_route_worker(ep, worker, time.perf_counter() - began)

    def _refused(self, ep: EndpointState, scope: Scope) -> tuple[int, bytes] | None:
        """The answer to a request whose key may not call ``ep``; None when it may (``INVOKE``)."""
        try:
            who = principal_of(Request(scope), self.state)
        except HTTPException:
            return _error("unauthorized", UNAUTHORIZED, 401)
        if caller_worker(who) is not None:
            return _error("forbidden", CALLER_REFUSED, 403)
        decision = decide_endpoint(who, Operation.INVOKE, *app_env_of(ep.spec.key))
        if decision is ALLOW:
            return None
        if isinstance(decision, Forbidden):
            return _error("forbidden", decision.message(), 403)
        # one it may not see: the answer of a path no endpoint serves (the app's own 404)
        return _error("not_found", f"no route {scope.get('method', '')} {scope['path']}", 404)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, refused past the limit while it streams in (nothing is forwarded before it is
        whole); None when empty."""
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        body: bytes = message.get("body", b"")
        if message.get("more_body"):
            chunks = [body]
            seen = len(body)
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > self.max_body_bytes:
                    raise _TooLarge
                chunks.append(chunk)
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
        if len(body) > self.max_body_bytes:
            raise _TooLarge
        return body or None

    async def _hold(self, ep: EndpointState, receive: Receive) -> Worker | Explanation:
        """No worker is ready: wait for one (scale from zero) unless the endpoint can never run (its explanation at
        once); a client that hangs up meanwhile stops waiting."""
        if ep.never is not None:
            return self.plane.explain_endpoint(ep.spec.key)
        held = asyncio.ensure_future(self.plane.hold_route_worker(ep, self.wait_s))
        gone = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait((held, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not held.done():
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
            raise ClientDisconnect
        return held.result()

    def _no_worker(self, ep: EndpointState, explanation: Explanation) -> tuple[int, bytes]:
        if explanation.never:
            message = f"endpoint {ep.spec.key!r} {explanation.summary}"
        else:
            message = (
                f"no worker of endpoint {ep.spec.key!r} was ready within {self.wait_s:g}s ({explanation.summary}); "
                "retry later, or see `flashpoint explain`"
            )
        return _error("no_worker", message, 503, explanation=explanation.to_json())

    def _read_timeout(self, ep: EndpointState) -> float:
        return ep.spec.execution_timeout_ms / 1000 or self.read_timeout_s

    async def _forward(
        self,
        ep: EndpointState,
        worker: Worker,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: list[bytes],
        content: bytes | None,
    ) -> int:
        method: str = scope["method"]
        raw = scope.get("raw_path") or scope["path"].encode()
        cut = raw.find(b"/", 1)  # the path below the endpoint's name, as the client encoded it
        target = raw[cut:] if cut > 0 else b"/"
        query = scope["query_string"]
        if query:
            target += b"?" + query
        address = worker.address
        assert address is not None
        headers.append(b"content-length: %d\r\n\r\n" % len(content) if content else b"\r\n")
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n%s" % (method.encode(), target, address.encode(), b"".join(headers))
        started = False
        try:
            exchange = await self.upstream.exchange(address, self._read_timeout(ep))
            try:
                exchange.send(head, content, head_only=method == "HEAD")
                status, answer = await exchange.head()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [(n, v) for n, v in answer if n.lower() not in _DROP_RESPONSE],
                    }
                )
                started = True
                if exchange.complete:  # arrived whole (most JSON answers): one message
                    body = await exchange.read()
                    await send({"type": "http.response.body", "body": body})
                elif exchange.length is None:
                    await self._stream_watching(exchange, receive, send)  # chunked, SSE: may go on for long
                else:
                    await _pump(exchange, send)
            finally:
                exchange.release()
            return status
        except WorkerTimeout:
            what = f"worker {worker.id} of {ep.spec.key!r} did not answer within {self._read_timeout(ep):g}s"
            return await self._failed(send, started, "worker_timeout", what, 504)
        except BadAnswer as exc:
            what = f"worker {worker.id} of {ep.spec.key!r} at {address} sent a bad answer ({exc})"
            return await self._failed(send, started, "bad_worker_answer", what, 502)
        except WorkerLost as exc:
            what = f"worker {worker.id} of {ep.spec.key!r} at {address} was lost mid-request ({exc})"
            return await self._failed(send, started, "worker_lost", what, 502)

    async def _stream_watching(self, exchange: Exchange, receive: Receive, send: Send) -> None:
        """Pump an answer of unknown length while watching the client: one that hangs up ends the exchange (and the
        worker sees its connection close), rather than leaving an endless stream running for nobody. The pump runs in
        this task and the watch in one more, which cancels this one only while it pumps (two tasks and an
        ``asyncio.wait`` cost a stream's first chunk about a tenth of a millisecond more)."""
        task = asyncio.current_task()
        assert task is not None
        pumping = True
        hung_up = False

        def client_gone(watch: asyncio.Future[None]) -> None:
            nonlocal hung_up
            # runs while this task waits: inside the pump, or after it (then it must not cancel what follows)
            if pumping and not watch.cancelled() and watch.exception() is None:
                hung_up = True
                task.cancel()

        watch = asyncio.ensure_future(_until_disconnect(receive))
        watch.add_done_callback(client_gone)
        try:
            await _pump(exchange, send)
        except asyncio.CancelledError:
            if not hung_up:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: this cancellation is handled here
            if uncancel is not None:
                uncancel()
        finally:
            pumping = False
            watch.cancel()

    async def _failed(self, send: Send, started: bool, code: str, what: str, status: int) -> int:
        if started:  # the status is sent: the client sees the connection close before the answer's end
            log.warning("%s; closing the client's connection mid-answer", what)
            return 0
        log.warning("%s; answering %d", what, status)
        status, body = _error(code, what, status)
        await _answer(send, status, body)
        return status


async def _pump(exchange: Exchange, send: Send) -> None:
    """Send the worker's answer on piece by piece as it arrives; the last one read ends the answer."""
    while True:
        piece = await exchange.read()
        last = exchange.done
        if piece or last:
            message: Message = {"type": "http.response.body", "body": piece, "more_body": not last}
            await send(message)
        if last:
            return
