"""``flashpoint jobs`` and ``flashpoint job`` show who submitted each job (``submittedBy``, decision 0100): a ``by``
column in the list, a ``submitted by`` line in one job's view, against a loopback server answering ``/v1``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flashpoint.cli import main

JOBS = [
    {"id": "a1-fp", "endpoint": "shop.prod.embed", "status": "COMPLETED", "reason": "completed", "createdAt": 2.0,
     "submittedBy": "ci-invoke", "placement": None},
    {"id": "b2-fp", "endpoint": "plain", "status": "IN_QUEUE", "reason": None, "createdAt": 1.0,
     "submittedBy": None, "placement": None},
]  # fmt: skip


class _Plane(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/v1/jobs/a1-fp"):
            answer: Any = {**JOBS[0], "logs": [], "explanation": None, "flash": None}
        elif self.path.startswith("/v1/jobs"):
            answer = {"jobs": JOBS}
        else:
            answer = {}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def plane_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("FLASHPOINT_STATE_DIR", str(tmp_path / "state"))  # main() reads the real environment
    monkeypatch.delenv("FLASHPOINT_API_KEY", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Plane)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _run(args: list[str]) -> None:
    try:
        main(args)
    except SystemExit as done:
        assert not done.code


def test_jobs_has_a_by_column(plane_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _run(["jobs", "--url", plane_url, "--key", "k"])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if " id " in f" {line} " and "status" in line)
    assert " by " in header
    row = next(line for line in out.splitlines() if "a1-fp" in line)
    assert "ci-invoke" in row
    assert "-" in next(line for line in out.splitlines() if "b2-fp" in line)


def test_job_shows_who_submitted_it(plane_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _run(["job", "a1-fp", "--url", plane_url, "--key", "k"])
    out = capsys.readouterr().out
    assert any(line.startswith("submitted by") and "ci-invoke" in line for line in out.splitlines()), out
