"""rc2's errors of the apps surface (``runpod/apps/errors.py``): the tree, the fixed messages, and their place under
flashpoint's own root."""

from __future__ import annotations

import pytest

import flashpoint
from flashpoint.runpodapps import AppError, EndpointNotFound, RemoteExecutionError, ScheduleNotSupported
from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.model import ModelError
from flashpoint.runpodapps.secret import SecretError
from flashpoint.runpodapps.volume import VolumeError


@pytest.mark.parametrize(
    "error",
    [
        EndpointNotFound,
        RemoteExecutionError,
        ScheduleNotSupported,
        InvalidResourceError,
        SecretError,
        ModelError,
        VolumeError,
    ],
)
def test_the_tree(error: type[Exception]) -> None:
    assert issubclass(error, AppError)
    assert issubclass(error, flashpoint.Error)


def test_codes_are_distinct() -> None:
    errors = [AppError, EndpointNotFound, RemoteExecutionError, ScheduleNotSupported, InvalidResourceError]
    errors += [SecretError, ModelError, VolumeError]
    codes = [error.code for error in errors]
    assert len(set(codes)) == len(codes)


def test_endpoint_not_found() -> None:
    error = EndpointNotFound("my-app", "transcribe")
    assert (error.app_name, error.resource_name) == ("my-app", "transcribe")
    assert str(error) == (
        "'transcribe' in app 'my-app' is not deployed. run `rp flash deploy` first, or use .local() to run it here."
    )


def test_schedule_not_supported() -> None:
    assert str(ScheduleNotSupported()).startswith("recurring schedules are not yet supported by the runpod api.")
