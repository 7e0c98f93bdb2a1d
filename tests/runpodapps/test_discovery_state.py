"""The discovery guard (rc2's ``runpod/apps/discovery_state.py``)."""

from __future__ import annotations

import pytest

import flashpoint
from flashpoint.runpodapps.discovery_state import DiscoveryInvocationError, in_discovery


def test_in_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not in_discovery()
    monkeypatch.setenv("RUNPOD_DISCOVERY_SCAN", "1")
    assert in_discovery()
    monkeypatch.setenv("RUNPOD_DISCOVERY_SCAN", "")
    assert not in_discovery()


def test_the_error() -> None:
    error = DiscoveryInvocationError("transcribe")
    assert str(error) == (
        "'transcribe' was invoked at import time. move calls into a function, an entrypoint, or an "
        '`if __name__ == "__main__":` guard so importing the file has no side effects.'
    )
    assert isinstance(error, flashpoint.Error)
