"""current_job(): the job object inside a handler, and a clear error outside one."""

from __future__ import annotations

import pytest

from flashpoint import current_job
from flashpoint.sdk.context import reset_current_job, set_current_job


def test_outside_a_job_it_says_where_it_works() -> None:
    with pytest.raises(RuntimeError, match="only available while a worker runs a job"):
        current_job()


def test_inside_a_job_it_is_the_job_object() -> None:
    job = {"id": "j1", "input": {}, "s3Config": {"bucketName": "b"}}
    token = set_current_job(job)
    try:
        assert current_job() is job
    finally:
        reset_current_job(token)
    with pytest.raises(RuntimeError):
        current_job()
