"""The errors of Runpod SDK 2.x's App surface, as rc2 names them (mirrors ``runpod/apps/errors.py`` of
``runpod==2.0.0rc2``): same classes, same messages, so code that catches rc2's errors catches flashpoint's.

    flashpoint.errors.Error          flashpoint's root: ``except flashpoint.Error`` catches these too
    └─ AppError                      rc2's base error of the apps surface
       ├─ EndpointNotFound           a resource was called that is not deployed (carries app_name, resource_name)
       ├─ RemoteExecutionError       the worker reported a failure running the function
       ├─ ScheduleNotSupported       rc2's refusal of @schedule at deploy time (flashpoint runs schedules: kept for
       │                             code that names it)
       ├─ InvalidResourceError       a decorator applied to an unsupported target or with bad options
       ├─ SecretError                (secret.py) a bad secret name
       ├─ ModelError                 (model.py) a bad model reference
       └─ VolumeError                (volume.py) a bad volume, mount or mount binding
    DiscoveryInvocationError         (discovery_state.py) a handle called at import time during a discovery scan

Standard library and ``flashpoint.errors`` only.
"""

from __future__ import annotations

from flashpoint.errors import Error

__all__ = ["AppError", "EndpointNotFound", "InvalidResourceError", "RemoteExecutionError", "ScheduleNotSupported"]


class AppError(Error):
    """base error for the apps sdk."""

    code = "app_error"


class EndpointNotFound(AppError):
    """a resource was invoked but is not deployed."""

    code = "endpoint_not_found"

    def __init__(self, app_name: str, resource_name: str) -> None:
        self.app_name = app_name
        self.resource_name = resource_name
        super().__init__(
            f"'{resource_name}' in app '{app_name}' is not deployed. "
            f"run `rp flash deploy` first, or use .local() to run it here."
        )


class RemoteExecutionError(AppError):
    """the remote worker reported a failure executing the function."""

    code = "remote_execution_failed"


class ScheduleNotSupported(AppError):
    """@schedule requires backend support that is not yet available (rc2's message; flashpoint never raises it)."""

    code = "schedule_not_supported"

    def __init__(self) -> None:
        super().__init__(
            "recurring schedules are not yet supported by the runpod api. "
            "the @schedule decorator records intent but cannot be deployed."
        )


class InvalidResourceError(AppError):
    """a decorator was applied to an unsupported target or with bad config."""

    code = "invalid_resource"
