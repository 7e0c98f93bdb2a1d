"""What a worker is started with (``scheduler/launcher.py``), through the test door: a deployed endpoint's worker is
told its app and environment, in Flash's variables and flashpoint's; one served outside any app is told none."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuType, NetworkVolume
from flashpoint.scheduler.launcher import app_env, check_secrets, no_app_secrets
from flashpoint.spec import MissingSecretsError
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
        # what Runpod SDK 2.x's workers read (decision 0108)
        "FLASH_RESOURCE_NAME": "embed",
        "FLASH_ENVIRONMENT": "production",
        "RUNPOD_MAX_CONCURRENCY": "1",
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


def test_a_plane_without_a_secret_store_reads_runpod_secret_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # embedded, run and dev planes keep no secrets: RUNPOD_SECRET_<name> in their environment serves (decision 0108)
    spec = Endpoint(name="embed", gpu=GpuType.NVIDIA_H200, env={"TOKEN": "{{ RUNPOD_SECRET_tok }}"}).spec
    monkeypatch.delenv("RUNPOD_SECRET_tok", raising=False)
    assert no_app_secrets("shop")("tok") is None
    with pytest.raises(MissingSecretsError, match="RUNPOD_SECRET_<name>"):
        check_secrets(spec, None)
    monkeypatch.setenv("RUNPOD_SECRET_tok", "s3cret")
    assert no_app_secrets("shop")("tok") == no_app_secrets(None)("tok") == "s3cret"
    check_secrets(spec, None)  # no error: the environment has it


async def test_an_embedded_planes_worker_gets_the_secret_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_SECRET_tok", "s3cret")
    door = await open_door()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1), env={"TOKEN": "{{ RUNPOD_SECRET_tok }}"})
    await door.step()
    assert door.backend.launch(door.worker("embed").id).env["TOKEN"] == "s3cret"
