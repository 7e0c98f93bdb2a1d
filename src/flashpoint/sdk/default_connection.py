"""The process-wide default connection: the one decorated functions use unless a handle was given another.

``connect()`` returns the connection set by ``use()``; else, with ``FLASHPOINT_URL`` set, an ``HTTPConnection`` to that
server; else, inside a worker, an ``HTTPConnection`` to the plane that started it (``FLASHPOINT_CALLER_URL``, with
the worker's caller key ``FLASHPOINT_CALLER_KEY``); else a new embedded server in this process (stopped at exit).
Both implementations are imported here lazily, on the first call: this is the SDK's one seam to the edge, so
``import flashpoint`` stays cheap and free of the HTTP stack, and neither ``embedded`` nor ``client`` imports the SDK
back (``tests/test_import_graph.py``).
"""

from __future__ import annotations

import atexit
import os
import threading

from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.sdk.connection import Connection

_lock = threading.Lock()
_current: Connection | None = None


def connect() -> Connection:
    """The connection decorated functions use: the one set by ``use()``, else a client or a new embedded server."""
    global _current
    with _lock:
        if _current is not None and not getattr(_current, "closed", False):
            return _current
        settings = Settings.load()
        if settings.url:  # client mode: the same decorated calls go to that server
            from flashpoint.sdk.client import HTTPConnection

            _current = HTTPConnection(settings.url, settings.api_key)
            return _current
        if os.environ.get("FLASHPOINT_WORKER_ID"):
            # a worker never starts a control plane of its own (it would hand its node's GPUs out again): it calls
            # the plane that started it, with the caller key that plane gave it (calls and its own jobs only)
            caller_url = os.environ.get("FLASHPOINT_CALLER_URL")
            if caller_url:
                from flashpoint.sdk.client import HTTPConnection

                _current = HTTPConnection(caller_url, os.environ.get("FLASHPOINT_CALLER_KEY"))
                return _current
            raise ConfigError(
                "an endpoint called another endpoint from inside a worker whose plane gave it no caller URL "
                "(FLASHPOINT_CALLER_URL), where no control plane runs: a worker never starts one of its own (it "
                "would hand out its node's GPUs again). Give the calling endpoint "
                "env={'FLASHPOINT_URL': 'http://HOST:PORT', 'FLASHPOINT_API_KEY': '...'}, or call the function "
                "directly (fn.local(...))"
            )
        from flashpoint.hosting.embedded import EmbeddedServer, show_worker_output  # noqa: TID251

        show_worker_output()
        embedded = EmbeddedServer(settings).start()
        atexit.register(embedded.close)
        _current = embedded
        return embedded


def use(conn: Connection | None) -> None:
    """Make ``conn`` the connection decorated functions use (``None``: the next call connects afresh)."""
    global _current
    with _lock:
        _current = conn
