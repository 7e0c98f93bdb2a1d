"""A job's error end to end: raised in a real worker from code shipped by value, caught here as its own type, with a
remote traceback that names this file and the line that raised (not cloudpickle's ``<dynamic-code>``)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from flashpoint import Endpoint, JobFailedError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class QuotaExceeded(Exception):
    """Defined in an importable module: the worker raises this very class, and this process has it."""

    def __init__(self, user: str, limit: int) -> None:
        super().__init__(f"{user} is over {limit}")


async def test_a_remote_error_is_its_own_type_with_the_users_file_and_line(make_embedded) -> None:
    make_embedded("NVIDIA_A100_80GB_PCIe:1")

    @Endpoint(name="raises", gpu="NVIDIA A100 80GB PCIe")
    async def raises(kind: str) -> None:
        if kind == "value":
            raise ValueError("bad value")
        raise QuotaExceeded("ann", 3)

    line = inspect.getsourcelines(raises.__wrapped__)[1] + 3  # the `raise ValueError` line
    with pytest.raises(ValueError, match="bad value") as info:
        await asyncio.wait_for(raises("value"), 60)
    error = info.value
    assert isinstance(error, JobFailedError) and error.remote_type == "ValueError"
    assert f'File "{__file__}", line {line}, in raises' in (error.remote_traceback or "")
    assert "<dynamic-code>" not in str(error)

    with pytest.raises(QuotaExceeded, match="ann is over 3"):
        await asyncio.wait_for(raises("quota"), 60)
