"""Volumes (rc2's ``runpod/apps/volume.py``): references, mounts, and a worker's bindings from ``RUNPOD_MOUNTS``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flashpoint.runpodapps import GlobalVolume, NetworkVolume, Volume
from flashpoint.runpodapps.volume import VolumeError, _configure_mounts, normalize_mounts, validate_mounts


def test_volumes() -> None:
    network = NetworkVolume("data", size=100, datacenter="EU-RO-1", create=False)
    assert (network.kind, network.name, network.reference, network.size, network.datacenter, network.create) == (
        "network",
        "data",
        "data",
        100,
        "EU-RO-1",
        False,
    )
    assert repr(network) == "<NetworkVolume 'data' size=100GB>"
    assert NetworkVolume("d").size == 50
    shared = GlobalVolume("models")
    assert (shared.kind, shared.name, shared.create, repr(shared)) == (
        "global",
        "models",
        True,
        "<GlobalVolume 'models'>",
    )
    with pytest.raises(TypeError):
        Volume("x")  # type: ignore[abstract]


@pytest.mark.parametrize("reference", ["", "  ", None, 3])
def test_bad_reference(reference: Any) -> None:
    with pytest.raises(VolumeError, match="^volume reference must be a non-empty string$"):
        NetworkVolume(reference)


def test_normalize_mounts() -> None:
    network, shared = NetworkVolume("v"), GlobalVolume("g")
    assert normalize_mounts(None) == {}
    assert normalize_mounts({"/a/b/": network, "/c//d": shared, "/e/./f": network}) == {
        "/a/b": network,
        "/c/d": shared,
        "/e/f": network,
    }


@pytest.mark.parametrize(
    ("mounts", "kind", "is_cpu", "message"),
    [
        ({"/data": NetworkVolume("a"), "/data/x": GlobalVolume("b")}, "task", False, "mount paths must not overlap"),
        ({"/": NetworkVolume("a"), "/x": GlobalVolume("b")}, "task", False, "mount paths must not overlap"),
        (
            {"/a": NetworkVolume("a"), "/b": NetworkVolume("b")},
            "task",
            False,
            "resources support at most one network volume",
        ),
        ({"/data": NetworkVolume("a")}, "queue", False, "endpoints support one volume mounted at /runpod-volume"),
        ({"/data": NetworkVolume("a")}, "api", False, "endpoints support one volume mounted at /runpod-volume"),
        ({"/runpod-volume": GlobalVolume("g")}, "queue", True, "global volumes require gpu compute"),
        ({"/data": GlobalVolume("g")}, "task", True, "global volumes require gpu compute"),
        ({"/etc": NetworkVolume("a")}, "sandbox", False, "sandbox mounts must not overlap /etc/resolv.conf"),
    ],
)
def test_validate_mounts(mounts: dict[str, Volume], kind: str, is_cpu: bool, message: str) -> None:
    with pytest.raises(VolumeError) as raised:
        validate_mounts(mounts, kind, is_cpu)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("mounts", "kind", "is_cpu"),
    [
        ({}, "queue", True),
        ({"/runpod-volume": NetworkVolume("a")}, "queue", True),
        ({"/runpod-volume": GlobalVolume("a")}, "api", False),
        ({"/data": NetworkVolume("a"), "/models": GlobalVolume("b")}, "task", False),
        ({"/data": NetworkVolume("a"), "/data2": GlobalVolume("b")}, "task", False),  # siblings, not nested
    ],
)
def test_good_mounts(mounts: dict[str, Volume], kind: str, is_cpu: bool) -> None:
    validate_mounts(mounts, kind, is_cpu)


BINDINGS = [
    {"kind": "network", "reference": "data", "id": "vol-1", "path": "/runpod-volume"},
    {"kind": "global", "reference": "models", "id": "gv-9", "path": "/models/"},
]


def test_path_from_runpod_mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_MOUNTS", json.dumps(BINDINGS))
    assert NetworkVolume("data").path == Path("/runpod-volume")
    assert NetworkVolume("vol-1").path == Path("/runpod-volume")  # by id too
    assert GlobalVolume("models").path == Path("/models")
    with pytest.raises(VolumeError, match=r"^network volume 'models' is not mounted in the current execution$"):
        _ = NetworkVolume("models").path  # the kind is part of the key
    # read once: a later change of the variable is not seen
    monkeypatch.setenv("RUNPOD_MOUNTS", "[]")
    assert NetworkVolume("data").path == Path("/runpod-volume")


def test_configured_bindings_win_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    _configure_mounts([])
    monkeypatch.setenv("RUNPOD_MOUNTS", json.dumps(BINDINGS))
    with pytest.raises(VolumeError, match="is not mounted"):
        _ = NetworkVolume("data").path


def test_not_mounted_without_bindings() -> None:
    with pytest.raises(VolumeError) as raised:
        _ = GlobalVolume("g").path
    assert str(raised.value) == "global volume 'g' is not mounted in the current execution"


def test_several_mounts_of_one_volume() -> None:
    _configure_mounts(
        [
            {"kind": "network", "reference": "data", "id": "v", "path": "/a"},
            {"kind": "network", "reference": "data", "id": "v", "path": "/b"},
        ]
    )
    with pytest.raises(VolumeError) as raised:
        _ = NetworkVolume("data").path
    assert str(raised.value) == "network volume 'data' has multiple mounts; use an explicit mount path"


@pytest.mark.parametrize(
    ("bindings", "message"),
    [
        ({"kind": "network"}, "worker mount bindings must be a list"),
        (["x"], "worker mount bindings must be objects"),
        (
            [{"kind": "local", "reference": "a", "id": "b", "path": "/a"}],
            "worker mount bindings require kind, reference, and id",
        ),
        (
            [{"kind": "network", "reference": "", "id": "b", "path": "/a"}],
            "worker mount bindings require kind, reference, and id",
        ),
        (
            [{"kind": "network", "reference": "a", "path": "/a"}],
            "worker mount bindings require kind, reference, and id",
        ),
        (
            [{"kind": "network", "reference": "a", "id": "b", "path": "a"}],
            "mount paths must be absolute paths without '..'",
        ),
        ([{"kind": "network", "reference": "a", "id": "b"}], "mount paths must be absolute paths without '..'"),
    ],
)
def test_bad_bindings(bindings: Any, message: str) -> None:
    with pytest.raises(VolumeError) as raised:
        _configure_mounts(bindings)
    assert str(raised.value) == message


def test_runpod_mounts_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_MOUNTS", "not json")
    with pytest.raises(VolumeError, match="^RUNPOD_MOUNTS is not JSON"):
        _ = NetworkVolume("data").path
