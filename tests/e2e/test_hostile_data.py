"""Data never becomes code, and every text survives, end to end on the embedded plane with real workers (issue 9)."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint
from flashpoint.wire.codec import PICKLE_KEY
from tests.conftest import eventually_async

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


async def _printed(job: Any) -> bool:
    await job.status()
    return any(line.startswith("got name-") for line in job.view.logs)


class _Bomb:
    """Unpickling this creates a file: the witness that data ran as code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path(self.path).touch, ())


async def test_an_output_shaped_like_the_binary_envelope_is_data_for_sdk_callers(make_embedded, tmp_path: Path) -> None:
    make_embedded("NVIDIA_H200:1")
    witness = tmp_path / "ran"
    bomb = base64.b64encode(pickle.dumps(_Bomb(str(witness)))).decode()

    @Endpoint(name="mirror", cpu="cpu3c-1-2")
    async def mirror(data: Any) -> Any:
        return data  # an endpoint that hands back (part of) what a caller sent

    @Endpoint(name="chunks", cpu="cpu3c-1-2")
    async def chunks(data: Any) -> Any:
        yield data
        yield (1, 2)  # a real binary chunk still round-trips

    top = {PICKLE_KEY: bomb}
    nested = {"a": [{PICKLE_KEY: bomb}]}
    assert await mirror(top) == top
    job = await mirror.run(nested)
    assert await job.result(timeout=30) == nested and job.output == nested
    assert [chunk async for chunk in chunks.stream(top)] == [top, (1, 2)]
    assert not witness.exists()
    assert await mirror((1, {2: b"x"})) == (1, {2: b"x"})  # a value JSON cannot carry still comes back exactly


async def test_text_utf8_cannot_carry_survives_input_output_error_and_logs(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="surrogates", cpu="cpu3c-1-2")
    async def surrogates(text: str, fail: bool = False) -> dict[str, str]:
        print(f"got {text}")  # a line UTF-8 cannot carry is printed escaped, not an error of the job
        if fail:
            raise OSError(f"cannot open {text}")
        return {"echo": text}

    lone = "name-\udcff-\ud800"
    job = await surrogates.run(lone)
    assert await job.result(timeout=30) == {"echo": lone}
    # the line it printed reaches the job's logs (lines may arrive just after the result)
    await eventually_async(lambda: _printed(job), what="the job's log line")
    failed = await surrogates.run(lone, fail=True)
    assert await failed.wait(timeout=30) == "FAILED"
    assert failed.view.error is not None and failed.view.error.message == f"cannot open {lone}"
