"""Tests for flashpoint.jobs: Runpod's statuses, the allowed moves, timings and the Runpod job JSON."""

from __future__ import annotations

import itertools
import json

import pytest

from flashpoint.errors import InvalidTransitionError
from flashpoint.jobs import (
    SUBMITTED_BY_KEY,
    TERMINAL,
    TRANSITIONS,
    Job,
    JobError,
    JobStatus,
    JobView,
    Placement,
    Reason,
    check_transition,
)

S = JobStatus

#: the moves DESIGN.md §4 allows: the happy path, retry/lost-worker back to the queue, and the terminal states
ALLOWED = {
    (S.IN_QUEUE, S.IN_PROGRESS),
    (S.IN_QUEUE, S.CANCELLED),
    (S.IN_QUEUE, S.TIMED_OUT),  # queue TTL expired
    (S.IN_QUEUE, S.FAILED),  # e.g. no worker could start
    (S.IN_PROGRESS, S.IN_QUEUE),  # worker lost
    (S.IN_PROGRESS, S.COMPLETED),
    (S.IN_PROGRESS, S.FAILED),
    (S.IN_PROGRESS, S.CANCELLED),
    (S.IN_PROGRESS, S.TIMED_OUT),
    (S.FAILED, S.IN_QUEUE),  # explicit retry
    (S.TIMED_OUT, S.IN_QUEUE),  # explicit retry
}
ALL_PAIRS = list(itertools.product(JobStatus, repeat=2))


def test_statuses_are_runpods_strings() -> None:
    assert [s.value for s in JobStatus] == [
        "IN_QUEUE",
        "IN_PROGRESS",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMED_OUT",
    ]
    assert str(JobStatus.IN_QUEUE) == "IN_QUEUE"
    assert JobStatus("COMPLETED") is JobStatus.COMPLETED


def test_terminal_states() -> None:
    assert frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT}) == TERMINAL
    assert [s for s in JobStatus if s.terminal] == [S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT]


def test_transitions_table_is_exactly_the_allowed_moves() -> None:
    assert set(TRANSITIONS) == set(JobStatus)
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == ALLOWED


@pytest.mark.parametrize("status", sorted(TERMINAL, key=list(JobStatus).index))
def test_terminal_states_are_final_except_failed_and_timed_out_back_to_queue(status: JobStatus) -> None:
    expected = {S.IN_QUEUE} if status in (S.FAILED, S.TIMED_OUT) else set()
    assert set(TRANSITIONS[status]) == expected


@pytest.mark.parametrize(("current", "new"), ALL_PAIRS, ids=[f"{a.value}->{b.value}" for a, b in ALL_PAIRS])
def test_job_move_allows_exactly_the_transitions(current: JobStatus, new: JobStatus) -> None:
    job = Job(id="j1", endpoint="ep", input={}, status=current)

    if (current, new) in ALLOWED:
        job.move(new)
        assert job.status is new
        check_transition(current, new)  # does not raise
    else:
        with pytest.raises(InvalidTransitionError) as info:
            job.move(new)
        assert str(info.value) == f"a job cannot move from {current.value} to {new.value}"
        assert job.status is current  # a refused move changes nothing
        with pytest.raises(InvalidTransitionError):
            check_transition(current, new)


def test_late_result_for_cancelled_job_is_refused() -> None:
    job = Job(id="j1", endpoint="ep", input={})
    job.move(S.IN_PROGRESS)
    job.move(S.CANCELLED)

    with pytest.raises(InvalidTransitionError):
        job.move(S.COMPLETED)
    assert job.status is S.CANCELLED


def test_new_job_is_queued_with_no_timings() -> None:
    job = Job(id="j1", endpoint="ep", input={"data": 1})

    assert job.status is S.IN_QUEUE
    assert job.reason is None
    assert job.delay_time_ms is None
    assert job.execution_time_ms is None
    assert job.retries == 0
    assert job.logs == []


# --- timings -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("created", "started", "finished", "delay", "execution"),
    [
        (100.0, None, None, None, None),
        (100.0, 100.25, None, 250, None),
        (100.0, 101.5, 104.0, 1500, 2500),
        (100.0, 100.0, 100.0, 0, 0),
        (100.0, None, 105.0, None, None),  # cancelled while queued: never started, so no execution time
    ],
)
def test_delay_and_execution_time_in_ms(
    created: float, started: float | None, finished: float | None, delay: int | None, execution: int | None
) -> None:
    job = Job(id="j1", endpoint="ep", input={}, created_at=created, started_at=started, finished_at=finished)

    assert job.delay_time_ms == delay
    assert job.execution_time_ms == execution


# --- the view and its Runpod JSON -----------------------------------------------------------------------------------


def _finished_job(**changes: object) -> Job:
    job = Job(
        id="job-1",
        endpoint="sdxl",
        input={"data": 1},
        status=S.COMPLETED,
        reason=Reason.COMPLETED,
        created_at=1000.0,
        started_at=1000.5,
        finished_at=1002.0,
        worker_id="w-7",
        placement=Placement(node="local", gpu_model="NVIDIA H200", device_ids=(0, 1), simulated=True),
        output={"images": ["..."]},
        logs=["hello"],
    )
    for key, value in changes.items():
        setattr(job, key, value)
    return job


def test_view_is_a_frozen_snapshot() -> None:
    job = _finished_job()
    view = job.view()
    job.logs.append("later")
    job.worker_id = "w-8"

    assert isinstance(view, JobView)
    assert view.logs == ("hello",)
    assert view.worker_id == "w-7"
    assert (view.delay_time_ms, view.execution_time_ms) == (500, 1500)
    with pytest.raises(AttributeError):
        view.status = S.FAILED  # type: ignore[misc]


def test_completed_job_json_has_runpod_keys_and_placement() -> None:
    body = _finished_job().view().to_json()

    assert body == {
        "id": "job-1",
        "status": "COMPLETED",
        "delayTime": 500,
        "executionTime": 1500,
        "workerId": "w-7",
        "output": {"images": ["..."]},
        "reason": "completed",
        "placement": {"node": "local", "gpuModel": "NVIDIA H200", "deviceIds": [0, 1], "simulated": True},
        "retries": 0,
    }
    assert json.loads(json.dumps(body)) == body


def test_failed_job_error_is_a_string_with_type_message_and_traceback() -> None:
    error = JobError("ValueError", "bad input", "Traceback (most recent call last):\n  ...\nValueError: bad input\n")
    body = _finished_job(status=S.FAILED, reason=Reason.USER_ERROR, output=None, error=error).view().to_json()

    assert isinstance(body["error"], str)  # Runpod clients read `error` as a string
    assert body["error"].startswith("ValueError: bad input\n")
    assert "Traceback (most recent call last):" in body["error"]
    assert "output" not in body
    assert body["status"] == "FAILED"
    assert body["reason"] == "user_error"


def test_error_without_traceback_is_its_message() -> None:
    body = _finished_job(status=S.FAILED, output=None, error=JobError("Timeout", "ran past 60 s")).view().to_json()
    assert body["error"] == "ran past 60 s"


def test_queued_job_json_leaves_out_what_it_does_not_have_yet() -> None:
    body = Job(id="job-2", endpoint="ep", input={}).view().to_json()

    assert body == {"id": "job-2", "status": "IN_QUEUE", "retries": 0}


def test_falsy_output_is_still_sent() -> None:
    for output in (0, False, "", [], {}):
        body = _finished_job(output=output).view().to_json()
        assert body["output"] == output


def test_reason_codes_are_stable_strings() -> None:
    assert {r.value for r in Reason} >= {
        "execution_timeout",
        "queue_ttl_expired",
        "worker_lost",
        "user_error",
        "cancelled",
    }
    assert str(Reason.WORKER_LOST) == "worker_lost"


def test_the_submitter_comes_out_of_the_metadata_and_never_reaches_the_worker() -> None:
    # the HTTP layer hands the key's name in with the request's flashpoint metadata; the job keeps it apart
    meta = {"target": "embed", SUBMITTED_BY_KEY: "ci"}
    job = Job(id="j", endpoint="shop.prod.embed", input={}, extra={"webhook": "https://x.test", "flashpoint": meta})
    assert job.submitted_by == "ci"
    assert job.extra == {"webhook": "https://x.test", "flashpoint": {"target": "embed"}}
    assert meta == {"target": "embed", SUBMITTED_BY_KEY: "ci"}  # the caller's dict is left as it was
    alone = Job(id="k", endpoint="e", input={}, extra={"flashpoint": {SUBMITTED_BY_KEY: "server"}})
    assert alone.submitted_by == "server" and alone.extra == {}
    view = job.view()
    assert view.submitted_by == "ci" and view.to_native()["submittedBy"] == "ci"
    assert JobView.from_native(view.to_native()).submitted_by == "ci"
    assert Job(id="l", endpoint="e", input={}).view().to_native()["submittedBy"] is None
