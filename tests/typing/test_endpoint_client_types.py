"""Static types of the client-mode SDK, checked by strict mypy: ``Endpoint(id=...)`` is typed as an EndpointClient.

The snippet is only read by mypy, never run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from collections.abc import AsyncIterator
from typing import Any

from typing_extensions import assert_type

from flashpoint import Endpoint, EndpointJob, JobFailedError, JobView
from flashpoint.sdk.client import HTTPConnection
from flashpoint.sdk.endpoint import Connection, EndpointClient, ServerConnection
from flashpoint.sdk.endpointclient import RouteCall
from flashpoint.explain import Explanation


async def check() -> None:
    client = Endpoint(id="inference")
    assert_type(client, EndpointClient)
    assert_type(Endpoint(name="inference"), Endpoint)
    assert_type(Endpoint("inference", gpu="H200"), Endpoint)
    job = await client.run({"prompt": "hi"}, webhook="https://hooks.example.com/")
    assert_type(job, EndpointJob)
    assert_type(await client.runsync({"prompt": "hi"}, timeout=5), EndpointJob)
    assert_type(await client.cancel("job-1"), EndpointJob)
    assert_type(client.job("job-1"), EndpointJob)
    assert_type(await job.wait(timeout=5), EndpointJob)
    assert_type(await job.cancel(), EndpointJob)
    assert_type(await job.status(), str)
    assert_type(job.error, str | None)
    assert_type(job.done, bool)
    assert_type(job.view, JobView)
    assert_type(job.failure, JobFailedError | None)
    assert_type(await client.explain(), Explanation)
    assert_type(client.stream({"n": 1}), AsyncIterator[Any])
    assert_type(client.post("/v1/completions", {"prompt": "hi"}, timeout=30), RouteCall)
    output = await client.get("/health")

    @Endpoint(name="gen")
    async def gen(n: int) -> AsyncIterator[int]:
        yield n

    conn: Connection = HTTPConnection("http://127.0.0.1:8000")
    server: ServerConnection = HTTPConnection("http://127.0.0.1:8000", "key", timeout_s=5)
    async for chunk in conn.stream("gen", {"n": 1}, {}):
        print(chunk, output, server)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_client_types_check_under_strict_mypy(tmp_path: Path) -> None:
    snippet = tmp_path / "client_types.py"
    snippet.write_text(textwrap.dedent(SNIPPET))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-version", "3.10", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
