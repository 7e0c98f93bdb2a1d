"""A failed job's error is raised as its own type where this process has that type (``jobhandle.remote_kind``), and
code shipped by value keeps its file name (``pickling.dumps_code``), so a remote traceback names the user's file."""

from __future__ import annotations

import dataclasses
import json.decoder
import pickle
import sys
import traceback

import pytest

from flashpoint.errors import JobCancelledError, JobFailedError
from flashpoint.jobs import JobError, JobStatus, JobView, Reason
from flashpoint.sdk.jobhandle import job_failure, remote_kind
from flashpoint.wire.pickling import dumps_code


class NeedsTwoArguments(Exception):
    def __init__(self, first: str, second: str) -> None:
        super().__init__(first, second)


class Outer:
    class Inner(Exception):
        pass


HERE = __name__


@pytest.mark.parametrize(
    ("remote_type", "expected"),
    [
        ("ValueError", ValueError),
        ("ZeroDivisionError", ZeroDivisionError),
        ("OSError", OSError),
        ("json.decoder.JSONDecodeError", json.decoder.JSONDecodeError),
        (f"{HERE}.NeedsTwoArguments", NeedsTwoArguments),
        (f"{HERE}.Outer.Inner", Outer.Inner),
    ],
)
def test_a_type_this_process_has_is_raised_as_itself_and_as_a_job_failure(remote_type: str, expected: type) -> None:
    kind = remote_kind(remote_type)
    assert issubclass(kind, expected) and issubclass(kind, JobFailedError)
    error = kind("job j ended FAILED", job_id="j", remote_type=remote_type, remote_traceback="Traceback ...")
    assert isinstance(error, expected) and error.job_id == "j" and "Remote traceback" in str(error)
    with pytest.raises(expected):
        raise error


@pytest.mark.parametrize(
    "remote_type",
    [
        "flashpoint_no_such_module.Boom",  # not loaded here: never imported because a worker named it
        "KeyboardInterrupt",  # not an Exception: never raised as itself
        "SystemExit",
        "flashpoint.errors.JobFailedError",
        f"{HERE}.HERE",  # not a class
        f"{HERE}.Outer",  # a class, not an exception
        "Error",
        "",
    ],
)
def test_anything_else_is_a_plain_job_failure(remote_type: str) -> None:
    assert remote_kind(remote_type) is JobFailedError
    assert "flashpoint_no_such_module" not in sys.modules


def ended(status: JobStatus, reason: Reason, kind: str) -> JobView:
    return dataclasses.replace(JobView.queued("j", "e"), status=status, reason=reason, error=JobError(kind, "boom"))


def test_only_a_users_own_error_takes_its_type() -> None:
    assert isinstance(job_failure(ended(JobStatus.FAILED, Reason.USER_ERROR, "KeyError")), KeyError)
    assert type(job_failure(ended(JobStatus.FAILED, Reason.WORKER_LOST, "KeyError"))) is JobFailedError
    assert type(job_failure(ended(JobStatus.CANCELLED, Reason.CANCELLED, "KeyError"))) is JobCancelledError


def test_code_shipped_by_value_keeps_its_file_and_line() -> None:
    def make() -> object:
        def shipped(x: int) -> None:
            raise ValueError(x)

        return shipped

    original = make()
    copy = pickle.loads(dumps_code(original))
    assert copy is not original and copy.__code__.co_filename == __file__  # type: ignore[attr-defined]
    with pytest.raises(ValueError) as info:
        copy(3)  # type: ignore[operator]
    frames = traceback.extract_tb(info.tb)
    assert frames[-1].filename == __file__ and frames[-1].name == "shipped"


def test_a_module_imported_later_is_found_then(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    assert remote_kind("flashpoint_late_module.LateError") is JobFailedError
    late = types.ModuleType("flashpoint_late_module")
    late.LateError = type("LateError", (Exception,), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashpoint_late_module", late)
    assert issubclass(remote_kind("flashpoint_late_module.LateError"), late.LateError)  # type: ignore[attr-defined]
