"""Network volumes as host directories (``volumes.py``) and what a worker sets up for itself (``worker/isolation``):
pure parts here; ``tests/e2e/test_volumes.py`` runs real workers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuGroup, NetworkVolume
from flashpoint.errors import InvalidEndpointError
from flashpoint.fleet import volumes
from flashpoint.fleet.volumes import volume_dir, volumes_root, worker_env
from flashpoint.worker import isolation


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FLASHPOINT_VOLUMES_DIR": "/srv/vol"}, Path("/srv/vol")),
        ({"FLASHPOINT_STATE_DIR": "/var/fp"}, Path("/var/fp/volumes")),
        ({"FLASHPOINT_VOLUMES_DIR": "/srv/vol", "FLASHPOINT_STATE_DIR": "/var/fp"}, Path("/srv/vol")),
        ({"HOME": "/home/u"}, Path("/home/u/.flashpoint/volumes")),
    ],
)
def test_volumes_root(env: dict[str, str], expected: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", env.get("HOME", "/home/u"))
    assert volumes_root(env) == expected


def test_a_volume_is_its_name_under_the_root_else_its_id() -> None:
    assert volume_dir(Path("/v"), NetworkVolume(name="models")) == Path("/v/models")
    assert volume_dir(Path("/v"), NetworkVolume(id="vol_123")) == Path("/v/vol_123")


@pytest.mark.parametrize(
    ("app", "env", "expected"),
    [
        (None, None, Path("/v")),  # an endpoint of no app: the root itself
        ("shop", "production", Path("/v/apps/shop/production")),
        ("shop", "staging", Path("/v/apps/shop/staging")),  # another environment: its own volumes
        ("lab", "production", Path("/v/apps/lab/production")),  # another app: its own volumes
    ],
)
def test_an_apps_volumes_are_its_own(app: str | None, env: str | None, expected: Path) -> None:
    root = volumes.app_root(Path("/v"), app, env)
    assert root == expected
    assert volume_dir(root, NetworkVolume(name="models")) == expected / "models"


def test_workers_are_told_every_volume_with_its_datacenter() -> None:
    env = worker_env([NetworkVolume(name="a"), NetworkVolume(name="b", datacenter="US-KS-2")], Path("/v"))
    assert json.loads(env["FLASHPOINT_VOLUMES"]) == [
        {"name": "a", "datacenter": "EU-RO-1", "path": "/v/a"},
        {"name": "b", "datacenter": "US-KS-2", "path": "/v/b"},
    ]
    assert worker_env([], Path("/v")) == {}


def test_runpod_sdk_2_workers_find_each_volume_as_a_network_and_a_global_one() -> None:
    # rc2's Volume.path looks a mount up by (kind, reference) in RUNPOD_MOUNTS (decision 0108)
    env = worker_env([NetworkVolume(name="a")], Path("/v"))
    assert json.loads(env["RUNPOD_MOUNTS"]) == [
        {"kind": "network", "reference": "a", "id": "a", "path": "/v/a"},
        {"kind": "global", "reference": "a", "id": "a", "path": "/v/a"},
    ]


@pytest.mark.parametrize("name", ["..", ".", "../etc", "a/b", "/abs", "white space", "x" * 129])
def test_a_volume_name_must_be_one_directory_name(name: str) -> None:
    with pytest.raises(InvalidEndpointError, match="a volume's name is a directory name here"):
        Endpoint(name="vol", gpu=GpuGroup.ANY, volume=NetworkVolume(name=name))


VOLUMES = json.dumps(
    [
        {"name": "eu", "datacenter": "EU-RO-1", "path": "/v/eu"},
        {"name": "us", "datacenter": "US-KS-2", "path": "/v/us"},
    ]
)


@pytest.mark.parametrize(
    ("text", "datacenter", "chosen"),
    [
        (VOLUMES, "US-KS-2", "us"),  # the node's datacenter picks its volume
        (VOLUMES, "EU-RO-1", "eu"),
        (VOLUMES, "", "eu"),  # a node without a datacenter label takes the first
        (VOLUMES, "US-CA-2", "eu"),  # none in the node's datacenter: the first
        ("", "", None),
        ("not json", "", None),
        ('[{"name": "no-path"}]', "", None),
        ('{"path": "/not/a/list"}', "", None),
    ],
)
def test_choose_volume(text: str, datacenter: str, chosen: str | None) -> None:
    volume = isolation.choose_volume(text, datacenter)
    assert (volume or {}).get("name") == chosen


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_pin_keeps_only_the_cores_this_machine_has() -> None:
    before = os.sched_getaffinity(0)
    first = min(before)
    try:
        assert isolation.pin(f"{first},100000") == (first,)
        assert os.sched_getaffinity(0) == {first}
        os.sched_setaffinity(0, before)
        assert isolation.pin("100000,100001") == ()  # none here: not pinned at all
        assert os.sched_getaffinity(0) == before
        assert isolation.pin("") == ()
        assert isolation.pin("zero") == ()
    finally:
        os.sched_setaffinity(0, before)


def test_apply_without_volume_or_cores_changes_nothing() -> None:
    env: dict[str, str] = {}
    assert isolation.apply(env) == {}
    assert env == {}


def test_apply_creates_the_volume_directory_and_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # mounting would change this test process's mount namespace: the real mount is tested with real workers
    monkeypatch.setattr(volumes, "can_mount", lambda: False)
    target = tmp_path / "vols" / "models"
    env = {"FLASHPOINT_VOLUMES": json.dumps([{"name": "models", "datacenter": "EU-RO-1", "path": str(target)}])}
    assert isolation.apply(env) == {"volume": str(target)}
    assert target.is_dir()
    assert env["FLASHPOINT_VOLUME_PATH"] == str(target)
