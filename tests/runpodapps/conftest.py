"""Every test here starts with no App registered, no entrypoint, no mount bindings, and none of the variables that
change where rc2's code thinks it runs; what a test registered is put back afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flashpoint.runpodapps import app, entrypoint, volume

#: variables rc2's surface reads to decide its context, its resource and its environment
CONTEXT_VARIABLES = (
    "RUNPOD_ENDPOINT_ID",
    "RUNPOD_POD_ID",
    "RUNPOD_DEV_SESSION",
    "RUNPOD_DEV_APP",
    "RUNPOD_DEV_RESOURCE",
    "RUNPOD_DISCOVERY_SCAN",
    "FLASH_RESOURCE_NAME",
    "RUNPOD_RESOURCE_NAME",
    "FLASH_ENVIRONMENT",
    "RUNPOD_MOUNTS",
    "FLASHPOINT_MODELS",
    "MODEL_REVISION",
)


@pytest.fixture(autouse=True)
def clean_apps_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in CONTEXT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    apps = app.get_registered_apps()
    entrypoints = list(entrypoint._ENTRYPOINTS)
    app._clear_registry()
    entrypoint._clear_entrypoints()
    volume._reset_mounts()
    yield
    app._restore_registry(apps)
    entrypoint._ENTRYPOINTS[:] = entrypoints
    volume._reset_mounts()
