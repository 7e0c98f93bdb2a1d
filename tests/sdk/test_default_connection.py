"""The SDK's default connection: inside a worker it never starts a control plane of its own."""

from __future__ import annotations

import pytest

from flashpoint.errors import ConfigError
from flashpoint.sdk import default_connection


def test_a_worker_never_starts_a_control_plane_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHPOINT_WORKER_ID", "w-1")
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)
    monkeypatch.delenv("FLASHPOINT_CALLER_URL", raising=False)
    default_connection.use(None)
    with pytest.raises(ConfigError, match="a worker never starts one of its own") as info:
        default_connection.connect()
    assert "FLASHPOINT_URL" in str(info.value)


def test_a_worker_with_a_server_url_calls_that_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHPOINT_WORKER_ID", "w-1")
    monkeypatch.setenv("FLASHPOINT_URL", "http://127.0.0.1:9")
    default_connection.use(None)
    try:
        conn = default_connection.connect()
        assert type(conn).__name__ == "HTTPConnection"
    finally:
        default_connection.use(None)


def test_a_worker_calls_its_plane_with_its_caller_key_unless_the_user_set_a_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLASHPOINT_WORKER_ID", "w-1")
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)
    monkeypatch.setenv("FLASHPOINT_CALLER_URL", "http://127.0.0.1:7")
    monkeypatch.setenv("FLASHPOINT_CALLER_KEY", "fpc.caller")
    default_connection.use(None)
    try:
        conn = default_connection.connect()
        assert (conn.url, conn.api_key) == ("http://127.0.0.1:7", "fpc.caller")  # type: ignore[attr-defined]
        monkeypatch.setenv("FLASHPOINT_URL", "http://127.0.0.1:9")
        monkeypatch.setenv("FLASHPOINT_API_KEY", "user-key")
        default_connection.use(None)
        conn = default_connection.connect()
        assert (conn.url, conn.api_key) == ("http://127.0.0.1:9", "user-key")  # type: ignore[attr-defined]
    finally:
        default_connection.use(None)
