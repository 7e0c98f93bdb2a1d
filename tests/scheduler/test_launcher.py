"""What a worker is started with (``scheduler/launcher.py``), through the test door: a deployed endpoint's worker is
told its app and environment, in Flash's variables and flashpoint's; one served outside any app is told none."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuType, NetworkVolume
from flashpoint.scheduler.launcher import app_env
from tests.scheduler.door import TARGET, open_door

APP_VARIABLES = ("FLASH_APP", "FLASH_ENV", "FLASHPOINT_APP", "FLASHPOINT_APP_ENV")


def test_app_env_of_a_deployed_endpoint_and_of_one_outside_any_app() -> None:
    spec = Endpoint(name="embed", gpu=GpuType.NVIDIA_H200).spec
    assert app_env(spec) == {}
    deployed = dataclasses.replace(spec, app="shop", app_env="production")
    assert app_env(deployed) == {
        "FLASH_APP": "shop",
        "FLASH_ENV": "production",
        "FLASHPOINT_APP": "shop",
        "FLASHPOINT_APP_ENV": "production",
    }


async def test_a_deployed_endpoints_worker_is_told_its_app_and_its_key_stays_the_endpoint() -> None:
    door = await open_door()
    spec = dataclasses.replace(
        Endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1)).spec, app="shop", app_env="production"
    )
    door.plane.register(spec, TARGET)
    door.endpoint(name="plain", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    deployed, plain = (door.backend.launch(w.id).env for w in (door.worker(spec.key), door.worker("plain")))
    assert deployed["FLASHPOINT_ENDPOINT"] == "shop.production.embed"
    assert [deployed[v] for v in APP_VARIABLES] == ["shop", "production", "shop", "production"]
    assert plain["FLASHPOINT_ENDPOINT"] == "plain" and not any(v in plain for v in APP_VARIABLES)
    await door.plane.close()


async def test_a_deployed_endpoints_volume_is_its_apps_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLASHPOINT_VOLUMES_DIR", str(tmp_path))
    door = await open_door("node-a=NVIDIA_H200:2")
    base = Endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1), volume=NetworkVolume(name="models")).spec
    for app in ("shop", "lab"):
        door.plane.register(dataclasses.replace(base, app=app, app_env="production"), TARGET)
    await door.step()
    paths = {
        app: json.loads(door.backend.launch(door.worker(f"{app}.production.embed").id).env["FLASHPOINT_VOLUMES"])
        for app in ("shop", "lab")
    }
    assert paths["shop"][0]["path"] == str(tmp_path / "apps" / "shop" / "production" / "models")
    assert paths["lab"][0]["path"] == str(tmp_path / "apps" / "lab" / "production" / "models")
