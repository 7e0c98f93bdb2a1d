"""A submitted job (rc2's ``runpod/apps/job.py``) over an in-memory target: status, result, cancel, stream, and the
sync and ``.aio`` forms of each."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flashpoint.runpodapps import Job, RemoteExecutionError
from tests.runpodapps.memtarget import MemoryTarget


def echo(text: str = "", fail: bool = False) -> dict[str, Any]:
    if fail:
        raise ValueError("asked to")
    return {"echo": text}


def chunks(n: int) -> Iterator[int]:
    yield from range(n)


async def submitted(target: MemoryTarget, **kwargs: Any) -> Job:
    return Job(await target.submit({"input": kwargs or {"__empty": True}}), target)


async def test_status_result_and_repr() -> None:
    target = MemoryTarget(echo)
    job = await submitted(target, text="hi")
    assert job.id == "job-1"
    assert repr(job) == "Job(id='job-1', status='IN_QUEUE')"
    assert not job.done
    assert await job.status.aio() == "COMPLETED"
    assert job.done
    assert await job.result.aio() == {"echo": "hi"}
    assert job.output is job.result
    assert repr(job) == "Job(id='job-1', status='COMPLETED')"


async def test_a_final_status_is_not_asked_again() -> None:
    target = MemoryTarget(echo)
    job = Job({"id": "gone", "status": "COMPLETED"}, target)
    assert await job.status.aio() == "COMPLETED"  # job-gone is unknown to the target: no round trip


async def test_a_failed_job_raises_on_result() -> None:
    job = await submitted(MemoryTarget(echo), fail=True)
    with pytest.raises(RemoteExecutionError, match="^remote execution failed: ValueError: asked to$"):
        await job.result.aio(timeout=5)


async def test_result_passes_its_timeout_and_updates_the_status() -> None:
    target = MemoryTarget(echo)
    job = await submitted(target)
    assert await job.result.aio(timeout=7) == {"echo": ""}
    assert target.timeouts == [7]
    assert job.done


async def test_cancel_returns_the_job() -> None:
    job = await submitted(MemoryTarget(echo))
    assert await job.cancel.aio() is job
    assert await job.status.aio() == "CANCELLED"


async def test_retry_says_when_the_target_has_none() -> None:
    job = await submitted(MemoryTarget(echo))
    with pytest.raises(NotImplementedError, match="MemoryTarget does not support job retries"):
        await job.retry.aio()


async def test_stream_aio() -> None:
    job = await submitted(MemoryTarget(chunks), n=3)
    assert [chunk async for chunk in job.stream.aio(timeout=2)] == [0, 1, 2]


def test_sync_forms() -> None:
    target = MemoryTarget(chunks)
    job = Job({"id": "x", "status": "IN_QUEUE"}, target)
    target.jobs["x"] = {"id": "x", "status": "COMPLETED", "output": [5, 6]}
    assert job.status() == "COMPLETED"
    assert job.result() == [5, 6]
    assert list(job.stream()) == [5, 6]
    assert job.cancel() is job and job.status() == "CANCELLED"


def test_an_id_less_job() -> None:
    assert Job({}, MemoryTarget()).id == ""
