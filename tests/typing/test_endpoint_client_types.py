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

from flashpoint import Endpoint, JobHandle
from flashpoint.client import HTTPConnection
from flashpoint.endpoint import Connection, EndpointClient, ServerConnection
from flashpoint.explain import Explanation


async def check() -> None:
    client = Endpoint(id="inference")
    assert_type(client, EndpointClient)
    assert_type(Endpoint(name="inference"), Endpoint)
    assert_type(Endpoint("inference", gpu="H200"), Endpoint)
    assert_type(await client.run({"prompt": "hi"}), JobHandle)
    assert_type(client.job("job-1"), JobHandle)
    assert_type(await client.cancel("job-1"), str)
    assert_type(await client.explain(), Explanation)
    assert_type(client.stream({"n": 1}), AsyncIterator[Any])
    output = await client.runsync({"prompt": "hi"}, timeout=5)

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
