"""Static types of decorated endpoints, checked by strict mypy: a decorated function keeps its parameters and its
result (``await infer(1)`` is a ``str``, ``infer.run(1)`` a ``JobHandle[str]``, ``infer.map`` yields ``str``), a
decorated class keeps its constructor's, and calls that do not fit are rejected.

The snippet is only read by mypy, never run. Each line marked ``# E: code`` must raise exactly that mypy error, and no
other line may raise any: a signature lost to ``Any`` silences the marked lines and fails the test.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from collections.abc import AsyncIterator, Iterator
from typing import Any

from typing_extensions import assert_type

from flashpoint import Endpoint, JobFailedError, JobHandle
from flashpoint.sdk.endpoint import EndpointInstance, MethodCall
from flashpoint.sdk.mapping import MapCall


@Endpoint(name="infer")
async def infer(x: int, scale: float = 1.0) -> str:
    return str(x * scale)


@Endpoint(name="double")
def double(x: int) -> int:
    return 2 * x


@Endpoint(name="count")
async def count(n: int) -> AsyncIterator[dict[str, int]]:
    for i in range(n):
        yield {"i": i}


@Endpoint(name="words")
def words(n: int) -> Iterator[str]:
    yield from ["word"] * n


class Model:
    def __init__(self, size: int) -> None:
        self.size = size

    def predict(self, x: int) -> str:
        return str(x * self.size)


RemoteModel = Endpoint(name="model")(Model)


@Endpoint(name="decorated-model")
class DecoratedModel:
    def __init__(self, size: int) -> None:
        self.size = size

    async def predict(self, x: int) -> str:
        return str(x * self.size)


async def check() -> None:
    # a function: awaited for its result, a def's too (the call is remote); a generator's result is its chunks
    assert_type(await infer(1), str)
    assert_type(await infer(1, scale=2.0), str)
    assert_type(await double(2), int)
    assert_type(await count(2), list[dict[str, int]])
    assert_type(await words(2), list[str])
    assert_type(count.stream(2), AsyncIterator[Any])

    # run: a job handle typed by the output
    handle = await infer.run(1)
    assert_type(handle, JobHandle[str])
    assert_type(await handle.result(), str)
    assert_type(handle.output, str | None)
    assert_type(await double.run(x=2), JobHandle[int])

    # map and starmap: the items are not typed, the outputs are
    assert_type(await infer.map([1, 2]), list[str])
    assert_type(infer.map([1, 2], return_exceptions=True), MapCall[str | JobFailedError])
    async for output in double.starmap([(1,), (2,)], ordered=False):
        assert_type(output, int)

    # a class called as Endpoint(...)(Model): the constructor's parameters; methods are remote calls, untyped
    model = RemoteModel(3)
    assert_type(model, EndpointInstance[Model])
    assert_type(model.predict, MethodCall)
    assert_type(await model.predict(1), Any)
    assert_type(await model.predict.run(1), JobHandle[Any])

    # a class under @Endpoint(...): mypy keeps the class's own type (it does not apply class decorators' return
    # types, python/mypy#3135), so the constructor is checked and an async method reads as the remote call does
    assert_type(await DecoratedModel(size=3).predict(1), str)

    # calls that do not fit
    await infer("one")  # E: arg-type
    await infer(1, 2.0, 3)  # E: call-arg
    await infer.run()  # E: call-arg
    await infer.run(x="one")  # E: arg-type
    await double(1, y=2)  # E: call-arg
    RemoteModel("big")  # E: arg-type
    RemoteModel()  # E: call-arg
    DecoratedModel(size="big")  # E: arg-type
    len(await double(2))  # E: arg-type
"""

#: ``file:LINE: error: message  [code]``
ERROR = re.compile(r"^[^:]+:(\d+): error: .*\[([a-z-]+)\]$")


def expected_errors(snippet: str) -> set[tuple[int, str]]:
    """``(line, code)`` for each line marked ``# E: code``."""
    return {
        (number, marked.group(1))
        for number, line in enumerate(snippet.splitlines(), start=1)
        if (marked := re.search(r"# E: ([a-z-]+)$", line))
    }


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_endpoint_types_check_under_strict_mypy(tmp_path: Path) -> None:
    snippet = textwrap.dedent(SNIPPET)
    path = tmp_path / "endpoint_types.py"
    path.write_text(snippet)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-version", "3.10", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    found = {(int(m.group(1)), m.group(2)) for line in done.stdout.splitlines() if (m := ERROR.match(line))}

    assert found == expected_errors(snippet), done.stdout + done.stderr
    assert len(expected_errors(snippet)) == 9  # the markers themselves are read
