"""The route proxy's settings, checked before anything starts: the wait bound (``serve --route-wait-s``,
``FLASHPOINT_ROUTE_WAIT_S``) and the readiness limit (``FLASHPOINT_ROUTE_READY_TIMEOUT_S``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashpoint import ConfigError
from flashpoint.cli import app
from flashpoint.config import Settings
from flashpoint.hosting.server import Server

runner = CliRunner()


def test_the_settings_default_to_a_minute_of_waiting_and_ten_of_starting() -> None:
    settings = Settings.load(env={})
    assert (settings.route_wait_s, settings.route_ready_timeout_s) == (60.0, 600.0)
    chosen = Settings.load(env={"FLASHPOINT_ROUTE_WAIT_S": "2.5", "FLASHPOINT_ROUTE_READY_TIMEOUT_S": "30"})
    assert (chosen.route_wait_s, chosen.route_ready_timeout_s) == (2.5, 30.0)


@pytest.mark.parametrize("name", ["FLASHPOINT_ROUTE_WAIT_S", "FLASHPOINT_ROUTE_READY_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["soon", "-1"])
def test_bad_values_are_refused_with_what_to_write(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.load(env={name: value})


def test_the_servers_wait_bound_comes_from_its_option_else_the_settings(tmp_path: Path) -> None:
    settings = Settings.load(env={"FLASHPOINT_ROUTE_WAIT_S": "7"})
    assert Server("app.py", settings=settings, db=tmp_path / "jobs.db").route_wait_s == 7.0
    assert Server("app.py", settings=settings, db=tmp_path / "jobs.db", route_wait_s=0).route_wait_s == 0.0
    with pytest.raises(ConfigError, match="--route-wait-s"):
        Server("app.py", settings=settings, db=tmp_path / "jobs.db", route_wait_s=-1)


def test_serve_takes_the_option(tmp_path: Path) -> None:
    env = {"FLASHPOINT_STATE_DIR": str(tmp_path / "state")}
    result = runner.invoke(app, ["serve", "--help"], env=env)
    assert "--route-wait-s" in result.output
    missing = str(tmp_path / "no_such_app.py")
    result = runner.invoke(app, ["serve", missing, "--port", "0", "--route-wait-s", "-3"], env=env)
    assert isinstance(result.exception, ConfigError) and "--route-wait-s" in str(result.exception)
