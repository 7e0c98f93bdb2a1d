"""Request body size limit, as plain ASGI middleware: a JSON 413 ``payload_too_large`` before anything is parsed.

One piece for the server's client routes (``api.app``) and for route workers (``worker/routeapp.py``); only the
advice in the message differs. Standard library only, so both the edge and worker processes can use it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

# the ASGI types, as Starlette spells them (``starlette.types``), so that this module imports no HTTP stack
Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["BodyLimit"]


class _TooLarge(BaseException):
    """Raised from ``receive``; a BaseException so that no handler inside turns it into a 500 or a 400 first."""


class BodyLimit:
    """Reject bodies over ``max_bytes`` with 413 ``payload_too_large``, by Content-Length or while streaming.

    ``advice`` ends the message: how the caller can get a larger body through (the server's flag, a worker's variable).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        advice: str = "send less, or raise --max-body-mb",
        exempt: Callable[[Scope], bool] | None = None,
    ) -> None:
        """``exempt``: the requests whose route bounds its body itself (a deploy's upload, under its own limit)."""
        self.app = app
        self.max_bytes = max_bytes
        self.advice = advice
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked_send)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        message = f"request body is larger than the limit of {self.max_bytes} bytes; {self.advice}"
        payload = json.dumps({"error": message, "code": "payload_too_large", "message": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})
