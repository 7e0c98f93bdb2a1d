"""Worker credentials: each worker gets its own key, bound to its id and its endpoint.

The plane keeps one secret and never hands it out. A worker's key is an HMAC of its endpoint and id under that
secret, so the worker routes check a request against the worker named in its path without keeping any state: code
of endpoint A holds a key that opens only A's routes for its own worker id, and cannot take B's queued jobs or post
a result for another worker's job.

Two more keys derive from a worker's key, each under its own prefix, so none opens what another does: its caller key
(``caller_credential``: calls to other endpoints) and a route worker's route secret (``route_credential``: what the
server's proxy presents to it on every request).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable


def worker_credential(secret: bytes, endpoint: str, worker_id: str) -> str:
    """The key of worker ``worker_id`` of ``endpoint`` (URL-safe text, 43 characters)."""
    message = endpoint.encode("utf-8", "surrogatepass") + b"\x00" + worker_id.encode("utf-8", "surrogatepass")
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


#: what starts a caller key (``caller_credential``): no worker key or API key the plane makes starts so
CALLER_PREFIX = "fpc."


def caller_credential(worker_key: str, endpoint: str, worker_id: str) -> str:
    """The caller key of worker ``worker_id`` of ``endpoint``, whose worker key is ``worker_key``.

    Code in a worker calls other endpoints with it (``FLASHPOINT_CALLER_KEY``). It names its worker, so the plane
    checks it without state: ``fpc.`` + the endpoint and worker id (URL-safe base64) + ``.`` + an HMAC of them under
    the worker key (itself an HMAC under the plane's secret). It cannot be turned back into the worker key, and it
    opens only the client routes ``caller_of``'s users allow (``api/runpod.py``, ``api/deps.py``).
    """
    who = endpoint.encode("utf-8", "surrogatepass") + b"\x00" + worker_id.encode("utf-8", "surrogatepass")
    mac = hmac.new(worker_key.encode("ascii"), b"caller\x00" + who, hashlib.sha256).digest()
    return CALLER_PREFIX + _b64(who) + "." + _b64(mac)


def caller_of(token: str, worker_key_of: Callable[[str, str], str]) -> tuple[str, str] | None:
    """``(endpoint, worker id)`` of a genuine caller key, else ``None``; the MAC is compared in constant time.

    ``worker_key_of(endpoint, worker_id)`` is the plane's ``worker_credential``.
    """
    if not token.startswith(CALLER_PREFIX) or len(token) > 1024:
        return None
    named, _, _mac = token[len(CALLER_PREFIX) :].partition(".")
    try:
        who = base64.urlsafe_b64decode(named + "=" * (-len(named) % 4))
        endpoint, worker_id = (part.decode("utf-8", "surrogatepass") for part in who.split(b"\x00"))
    except ValueError:  # bad base64, not two parts, not UTF-8
        return None
    expected = caller_credential(worker_key_of(endpoint, worker_id), endpoint, worker_id)
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return None
    return endpoint, worker_id


def route_credential(worker_key: str, endpoint: str, worker_id: str) -> str:
    """The route secret of route worker ``worker_id`` of ``endpoint``, whose worker key is ``worker_key``.

    The server's proxy sends it with every request to that worker (``wire.ROUTE_SECRET_HEADER``) and the worker gets
    it in ``FLASHPOINT_ROUTE_SECRET``; flashpoint's route worker answers nothing without it, so a local process cannot
    call the worker directly and skip the server's key. An HMAC of the endpoint and worker id under the worker key,
    with a ``route`` prefix: it is not the worker key, a caller key, or any other worker's secret, and none of those
    can be computed from it (URL-safe text, 43 characters).
    """
    who = endpoint.encode("utf-8", "surrogatepass") + b"\x00" + worker_id.encode("utf-8", "surrogatepass")
    return _b64(hmac.new(worker_key.encode("ascii"), b"route\x00" + who, hashlib.sha256).digest())


def bearer(header: str | None) -> str:
    """The key in an ``Authorization`` header (``Bearer KEY`` or the raw key); empty without one."""
    if not header:
        return ""
    return (header[7:] if header[:7].lower() == "bearer " else header).strip()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
