"""Worker credentials: each worker gets its own key, bound to its id and its endpoint.

The plane keeps one secret and never hands it out. A worker's key is an HMAC of its endpoint and id under that
secret, so the worker routes check a request against the worker named in its path without keeping any state: code
of endpoint A holds a key that opens only A's routes for its own worker id, and cannot take B's queued jobs or post
a result for another worker's job.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def worker_credential(secret: bytes, endpoint: str, worker_id: str) -> str:
    """The key of worker ``worker_id`` of ``endpoint`` (URL-safe text, 43 characters)."""
    message = endpoint.encode("utf-8", "surrogatepass") + b"\x00" + worker_id.encode("utf-8", "surrogatepass")
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
