"""The plane builder (hosting/plane.py): what each composition root's plane gets. ``flashpoint serve``'s is durable
with serve's limits, ``flashpoint dev``'s and a script's embedded plane end their jobs with them; every one takes its
tunables from ``config.Settings`` and its workers' environment from the backend, plus its root's additions."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashpoint.config import Settings
from flashpoint.dev.server import DevServer
from flashpoint.errors import ConfigError
from flashpoint.hosting.embedded import EMBEDDED_ROLE
from flashpoint.hosting.plane import PlaneRole, app_simulated, build_plane, plane_settings
from flashpoint.hosting.server import Server
from flashpoint.scheduler.jobbook import MAX_QUEUED_BYTES, MAX_QUEUED_JOBS
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.store.memory import MemoryJobStore
from flashpoint.store.sqlite import SQLiteJobStore
from flashpoint.wire import codec

SETTINGS = Settings.load(
    env={"FLASHPOINT_TAKE_HOLD_S": "7", "FLASHPOINT_NODE": "node-a", "FLASHPOINT_ROUTE_READY_TIMEOUT_S": "33"}
)
BACKEND_ENV = {"PYTHONPATH": "/app", "RUNPOD_LOG_LEVEL": "WARNING"}

#: each root's role, as its composition root makes it
ROLES: dict[str, Callable[[Path], PlaneRole]] = {
    "serve": lambda tmp: Server(
        "app.py",
        settings=SETTINGS,
        max_body_bytes=3 * 2**20,
        max_result_bytes=5_000,
        max_queued_jobs=12,
        max_queued_bytes=9_000,
    ).plane_role(),  # fmt: skip
    "dev": lambda tmp: DevServer(tmp, settings=SETTINGS).plane_role(),
    "embedded": lambda tmp: EMBEDDED_ROLE,
}

#: root -> the PlaneSettings fields its root decides
EXPECTED: dict[str, dict[str, Any]] = {
    "serve": {
        "requeue_on_close": True,
        "max_result_bytes": 5_000,
        "max_queued_jobs": 12,
        "max_queued_bytes": 9_000,
        # the body limit travels exactly; the backend's RUNPOD_LOG_LEVEL is kept (serve's is only a default)
        "worker_env": {**BACKEND_ENV, "FLASHPOINT_MAX_BODY_MB": "3.0"},
    },
    "dev": {
        "requeue_on_close": False,
        "max_result_bytes": codec.MAX_RESULT_BYTES,
        "max_queued_jobs": MAX_QUEUED_JOBS,
        "max_queued_bytes": MAX_QUEUED_BYTES,
        "worker_env": {**BACKEND_ENV, "PYTHONDONTWRITEBYTECODE": "1"},
    },
    "embedded": {
        "requeue_on_close": False,
        "max_result_bytes": codec.MAX_RESULT_BYTES,
        "max_queued_jobs": MAX_QUEUED_JOBS,
        "max_queued_bytes": MAX_QUEUED_BYTES,
        "worker_env": BACKEND_ENV,
    },
}


@pytest.mark.parametrize("root", sorted(ROLES))
def test_each_root_gets_its_own_plane_settings_and_the_shared_ones(root: str, tmp_path: Path) -> None:
    role = ROLES[root](tmp_path)

    got = plane_settings(SETTINGS, role, base_url="http://127.0.0.1:9", worker_env=BACKEND_ENV, parent_pid=42)

    assert {name: getattr(got, name) for name in EXPECTED[root]} == EXPECTED[root]
    # what every root takes from config.Settings, the backend and its socket
    assert (got.take_hold_s, got.node, got.route_ready_timeout_s) == (7.0, "node-a", 33.0)
    assert (got.parent_pid, got.base_url) == (42, "http://127.0.0.1:9")
    # and the rest is PlaneSettings' own
    defaults = PlaneSettings()
    assert (got.tick_s, got.stop_grace_s, got.ping_interval_s, got.route_poll_s) == (
        defaults.tick_s, defaults.stop_grace_s, defaults.ping_interval_s, defaults.route_poll_s,
    )  # fmt: skip


def test_serve_sets_runpods_log_level_only_below_debug(tmp_path: Path) -> None:
    root = logging.getLogger()
    level = root.level
    try:
        root.setLevel(logging.INFO)
        quiet = ROLES["serve"](tmp_path)
        root.setLevel(logging.DEBUG)
        chatty = ROLES["serve"](tmp_path)
    finally:
        root.setLevel(level)

    assert quiet.worker_env_defaults == {"RUNPOD_LOG_LEVEL": "INFO"}
    assert chatty.worker_env_defaults == {}
    no_level = plane_settings(SETTINGS, quiet, base_url="", worker_env={"PYTHONPATH": "/app"}, parent_pid=None)
    assert no_level.worker_env["RUNPOD_LOG_LEVEL"] == "INFO"


def test_build_plane_opens_the_backend_over_the_fleet_and_hands_the_settings_to_the_plane(tmp_path: Path) -> None:
    plane = build_plane(SETTINGS, EMBEDDED_ROLE, base_url="http://127.0.0.1:9", simulated="NVIDIA_H200:2")

    assert isinstance(plane.store, MemoryJobStore) and not plane.settings.requeue_on_close
    assert plane.settings.base_url == "http://127.0.0.1:9" and plane.settings.take_hold_s == 7.0
    assert plane.settings.parent_pid == os.getpid()  # local workers die with this process
    assert plane.settings.worker_env["PYTHONUNBUFFERED"] == "1"
    assert [d.model.name for d in plane.supervisor.backend.devices()] == ["NVIDIA H200", "NVIDIA H200"]


def test_a_durable_role_gets_a_sqlite_store_at_its_file_and_requeues_on_close(tmp_path: Path) -> None:
    plane = build_plane(SETTINGS, PlaneRole(db=tmp_path / "jobs.db"), base_url="", simulated="NVIDIA_H200:1")
    try:
        assert isinstance(plane.store, SQLiteJobStore) and (tmp_path / "jobs.db").exists()
        assert plane.settings.requeue_on_close
    finally:
        plane.store.close()


async def test_a_roles_secrets_reach_its_plane_and_a_role_without_refuses_references(tmp_path: Path) -> None:
    from flashpoint import Endpoint, GpuGroup, Secret
    from flashpoint.hosting.secretstore import SecretStore
    from flashpoint.spec import MissingSecretsError, WorkerTarget

    store = SecretStore(tmp_path / "secrets")
    store.set("hf", "v")
    declared = Endpoint(name="llm", gpu=GpuGroup.ANY, env={"T": Secret("hf")}).spec
    target = WorkerTarget(import_path="app:llm")
    with_secrets = build_plane(SETTINGS, PlaneRole(secrets=store.resolver), base_url="", simulated="NVIDIA_H200:1")
    with_secrets.register(declared, target)
    assert "llm" in with_secrets.endpoints
    without = build_plane(SETTINGS, EMBEDDED_ROLE, base_url="", simulated="NVIDIA_H200:1")
    with pytest.raises(MissingSecretsError, match="hf"):
        without.register(declared, target)


def test_a_fleet_that_cannot_be_read_leaves_no_store_behind(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_plane(SETTINGS, PlaneRole(db=tmp_path / "jobs.db"), base_url="", simulated="NOT_A_GPU:2")
    assert not (tmp_path / "jobs.db").exists()


def test_serve_and_dev_read_the_simulated_fleet_an_app_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHPOINT_SIMULATED_GPUS", "NVIDIA_A100_80GB_PCIe:1")  # set by the app, after the settings

    assert app_simulated(Settings.load(env={})) == "NVIDIA_A100_80GB_PCIe:1"
    assert app_simulated(Settings.load(env={"FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1"})) == "NVIDIA_H200:1"
