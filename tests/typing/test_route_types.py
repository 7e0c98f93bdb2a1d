"""Static types of route declarations, checked by strict mypy: ``@api.post("/path")`` keeps the function's own type
(Flash's passthrough), a declaration takes no data, and a client's verbs still return a ``RouteCall``.

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
from collections.abc import Iterator

from typing_extensions import assert_type

from flashpoint import Endpoint
from flashpoint.sdk.endpointclient import RouteCall
from flashpoint.spec import WorkerTarget

api = Endpoint(name="my-api", workers=(1, 3))


@api.post("/compute")
async def compute(numbers: list[float]) -> dict[str, float]:
    return {"sum": sum(numbers)}


@api.get("/items/{item_id}")
def item(item_id: int, q: str = "") -> dict[str, object]:
    return {"id": item_id, "q": q}


@api.get("/stream")
def stream(n: int) -> Iterator[int]:
    yield from range(n)


async def check() -> None:
    assert_type(api, Endpoint)
    assert_type(await compute([1.0]), dict[str, float])
    assert_type(item(3, q="x"), dict[str, object])
    assert_type(stream(2), Iterator[int])
    assert_type(api.worker_target(), WorkerTarget)
    assert_type(Endpoint(id="my-api").post("/compute", {"numbers": [1]}), RouteCall)
    api.put("/x", {"a": 1})  # type: ignore[arg-type]  # a declaration takes the path alone
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_route_types_check_under_strict_mypy(tmp_path: Path) -> None:
    snippet = tmp_path / "route_types.py"
    snippet.write_text(textwrap.dedent(SNIPPET))
    done = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--warn-unused-ignores",
            "--python-version", "3.10", str(snippet),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
