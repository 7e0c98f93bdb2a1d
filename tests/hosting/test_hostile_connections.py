"""The server's edge against hostile or broken clients, on a real `flashpoint serve` process and real sockets:
half-sent requests, stalled bodies, more connections than the process may open, clients that hang up mid-body."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import ROOT, start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KEY = "edge-key"


@dataclass
class Edge:
    """A running server: its address, its stderr log file and its process."""

    host: str
    port: int
    log: Path
    proc: subprocess.Popen[str]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=30)

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[Callable[..., Edge]]:
    """Start `flashpoint serve` with its stderr in a file; ``nofile`` lowers its open-file limit (soft and hard)."""
    started: list[Edge] = []

    def start(*args: str, nofile: int | None = None) -> Edge:
        env = {
            **os.environ,
            "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1",
            "FLASHPOINT_API_KEY": KEY,
            "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
            "FLASHPOINT_TAKE_HOLD_S": "5",
        }
        log = tmp_path / f"server-{len(started)}.log"

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/runpod_app.py"),
                   "--port", "0", "--db", str(tmp_path / f"jobs-{len(started)}.db"), *args]  # fmt: skip
        with log.open("w") as err:
            try:
                proc, url = start_serve_process(command, env, stderr=err, preexec_fn=limit)
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {log.read_text()[-2000:]}") from None
        where = urlsplit(url)
        assert where.hostname is not None and where.port is not None
        served = Edge(where.hostname, where.port, log, proc)
        started.append(served)
        return served

    yield start
    for served in started:
        stop_process(served.proc)


def head(method: str, path: str, length: int | None = None, key: str | None = KEY) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: test", "content-type: application/json"]
    if key is not None:
        lines.append(f"authorization: Bearer {key}")
    if length is not None:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def wait_for_text(read: Callable[[], str], text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while text not in (seen := read()):
        assert time.monotonic() < deadline, f"{text!r} did not appear within {timeout}s; last: {seen[-2000:]!r}"
        time.sleep(0.05)  # polling a log file, bounded by the deadline
    return seen


def wait_closed(sock: socket.socket, timeout: float) -> bytes:
    """Read until the server closes the connection (within ``timeout`` s); what it sent before closing."""
    sock.settimeout(timeout)
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the server did not close the connection within {timeout}s")


# ----------------------------------------------------------------------------------------------------------------------
# a client hanging up mid-body


def test_a_client_hanging_up_mid_body_logs_no_traceback(edge: Callable[..., Edge]) -> None:
    served = edge()
    for path in ("/v2/echo/run", "/v2/echo/runsync"):
        sock = served.connect()
        sock.sendall(head("POST", path, length=1000) + b'{"input": ')
        sock.shutdown(socket.SHUT_WR)  # the client is gone: the server reads the end of the stream
        wait_closed(sock, 30)  # the server saw it and closed its side
        sock.close()
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        assert client.get("/v2/echo/health").status_code == 200
    # a marker the server logs itself, after the disconnects were handled
    with served.connect() as sock:
        sock.sendall(b"NOT HTTP\r\n\r\n")
        wait_closed(sock, 30)
    log = wait_for_text(served.logged, "Invalid HTTP request received")
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


# ----------------------------------------------------------------------------------------------------------------------
# read deadlines


def test_a_request_whose_headers_stall_is_closed_after_the_header_deadline(edge: Callable[..., Edge]) -> None:
    served = edge("--header-timeout-s", "0.5")
    silent = served.connect()  # sends nothing at all
    half = served.connect()
    half.sendall(b"GET /v2/echo/health HTTP/1.1\r\nhost: test\r\n")  # and never the blank line
    assert wait_closed(half, 30).startswith(b"HTTP/1.1 408")
    assert wait_closed(silent, 30).startswith(b"HTTP/1.1 408")
    half.close()
    silent.close()


def test_keep_alive_idles_freely_but_its_next_request_has_the_header_deadline(edge: Callable[..., Edge]) -> None:
    served = edge("--header-timeout-s", "0.5")
    kept = served.connect()
    kept.sendall(head("GET", "/v2/echo/health"))
    assert kept.recv(65536).startswith(b"HTTP/1.1 200")
    # the idle keep-alive connection is governed by uvicorn's keep-alive timeout (120 s), not the header deadline:
    # while it idles, a stalled connection made after it is closed by its header deadline, and it is not
    stalled = served.connect()
    stalled.sendall(b"GET /v2/echo/health HTTP/1.1\r\n")
    wait_closed(stalled, 30)
    stalled.close()
    kept.sendall(head("GET", "/v2/echo/health"))
    assert kept.recv(65536).startswith(b"HTTP/1.1 200")
    kept.sendall(b"GET /v2/echo/health HTTP/1.1\r\nhost: test\r\n")  # the next request's headers stall
    assert wait_closed(kept, 30).startswith(b"HTTP/1.1 408")
    kept.close()


def test_a_stalled_body_is_closed_after_the_body_deadline(edge: Callable[..., Edge]) -> None:
    served = edge("--body-timeout-s", "1")
    with served.connect() as sock:  # authenticated: the app waits for the body, which never comes
        sock.sendall(head("POST", "/v2/echo/run", length=100) + b'{"input": ')
        answer = wait_closed(sock, 30)
    assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer
    with served.connect() as sock:  # unauthenticated: answered 401 at once, then the stalled body is dropped
        sock.sendall(head("POST", "/v2/echo/run", length=100, key=None) + b'{"input": ')
        answer = wait_closed(sock, 30)
    assert answer.startswith(b"HTTP/1.1 401")
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        assert client.get("/v2/echo/health").status_code == 200


def test_a_long_poll_held_past_the_deadlines_answers_normally(edge: Callable[..., Edge]) -> None:
    served = edge("--header-timeout-s", "0.5", "--body-timeout-s", "0.5")
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
        started = time.monotonic()
        answer = client.post("/v2/slow/runsync?wait=30000", json={"input": {"seconds": 2}})
        assert answer.status_code == 200 and answer.json()["status"] == "COMPLETED", answer.text
        assert answer.json()["output"] == "slept"
        assert time.monotonic() - started > 1  # held past both deadlines
        # and the same keep-alive connection serves the next request
        assert client.get("/v2/echo/health").status_code == 200


# ----------------------------------------------------------------------------------------------------------------------
# more connections than the process may open


def test_half_sent_connections_beyond_the_open_file_limit_do_not_lock_clients_out(edge: Callable[..., Edge]) -> None:
    # 256 open files: the cap is 128 connections; 300 slowloris connections would exhaust the limit without it.
    # A header deadline of 60 s: what closes the oldest ones here is the cap, not the deadline.
    served = edge("--header-timeout-s", "60", nofile=256)
    sockets: list[socket.socket] = []
    try:
        for _ in range(300):
            sock = served.connect()
            sock.sendall(b"POST /v2/echo/run HTTP/1.1\r\nhost: test\r\ncontent-length: 1000\r\n")  # no key, no end
            sockets.append(sock)
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
            assert client.get("/v2/echo/health").status_code == 200
            done = client.post("/v2/echo/runsync", json={"input": {"n": 1}})
            assert done.status_code == 200 and done.json()["status"] == "COMPLETED", done.text
        # the oldest half-sent connections were closed to make room; the newest still wait for their headers
        assert wait_closed(sockets[0], 30) == b""
        sockets[-1].setblocking(False)
        with pytest.raises(BlockingIOError):
            sockets[-1].recv(1)
    finally:
        for sock in sockets:
            sock.close()
