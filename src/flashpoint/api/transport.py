"""One write per response: uvicorn's httptools protocol writes a response's head and its body with two
``transport.write`` calls, which is two system calls and two TCP segments for every small JSON answer. Here the head
waits for the body (or for the end of the loop iteration, whichever comes first) and both go out together.

Measured with ``bench/bench_server.py``: writes were the largest share of the server's CPU per job after the event
loop itself, since every job is two HTTP exchanges (the client's, and the worker's result carrying its next job).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: above this, a body is handed over as a second buffer instead of being copied behind the head
_COPY_LIMIT = 64 * 1024


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
        if len(data) <= _COPY_LIMIT:
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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a transport that sends a response's head and body in one write."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Coalescing(transport, self.loop))  # type: ignore[arg-type]
