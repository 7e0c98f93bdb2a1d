"""The serve console's words (``console.py``): a finished job's line and level, and the level of a worker's line."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from flashpoint.hosting.console import job_level, job_line
from flashpoint.jobs import JobError, JobStatus, JobView, Placement, Reason
from flashpoint.wire.protocol import line_level

H200 = Placement("node-a", "NVIDIA H200", (0, 1), True)
CPU = Placement("node-a", None, (), False, cpu_instance="cpu3c-2-4", cores=(2, 3))


def view(
    status: JobStatus, placement: Placement | None, reason: Reason | None = None, error: JobError | None = None
) -> JobView:
    base = JobView.queued("j1-fp", "echo")
    return dataclasses.replace(
        base, status=status, placement=placement, reason=reason, error=error, execution_time_ms=1234
    )


@pytest.mark.parametrize(
    ("job", "line", "level"),
    [
        (
            view(JobStatus.COMPLETED, H200),
            "echo j1-fp COMPLETED in 1.23s on NVIDIA H200 (simulated) [0,1] node-a",
            logging.INFO,
        ),
        (view(JobStatus.COMPLETED, CPU), "echo j1-fp COMPLETED in 1.23s on cpu3c-2-4 cores [2,3] node-a", logging.INFO),
        (
            view(JobStatus.FAILED, H200, Reason.USER_ERROR, JobError("ValueError", "bad shape\nmore lines")),
            "echo j1-fp FAILED in 1.23s on NVIDIA H200 (simulated) [0,1] node-a: user_error: ValueError: bad shape",
            logging.WARNING,
        ),
        (
            view(JobStatus.TIMED_OUT, None, Reason.QUEUE_TTL_EXPIRED),
            "echo j1-fp TIMED_OUT in 1.23s (never ran): queue_ttl_expired",
            logging.WARNING,
        ),
        (
            view(JobStatus.CANCELLED, None, Reason.CANCELLED),
            "echo j1-fp CANCELLED in 1.23s (never ran): cancelled",
            logging.INFO,
        ),
    ],
    ids=["gpu", "cpu", "failed", "timed-out", "cancelled"],
)
def test_a_finished_job_is_one_line(job: JobView, line: str, level: int) -> None:
    assert job_line(job) == line
    assert job_level(job) == level


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("DEBUG  | Started.", logging.DEBUG),
        ("INFO   | Job j1 completed.", logging.INFO),
        ("WARN   | slow", logging.WARNING),
        ("ERROR  | boom", logging.ERROR),
        ('{"requestId": "j1", "message": "polling", "level": "DEBUG"}', logging.DEBUG),
        ('{"requestId": null, "message": "m", "level": "ERROR"}', logging.ERROR),
        ("print from user code", logging.INFO),
        ("DEBUGGING is fun", logging.INFO),
        ('{"level": 3}', logging.INFO),
        ("{not json", logging.INFO),
    ],
)
def test_a_worker_line_keeps_the_level_runpods_logger_printed_it_at(line: str, level: int) -> None:
    assert line_level(line) == level
