"""Options of `flashpoint serve` checked before anything starts: API keys (stripped where they are read; a blank key
is refused, not silently accepted), --allow-pickle (only with a key), and connection limits (`flashpoint dev`'s too).

Covers ``flashpoint.cli.serve`` (``flashpoint serve``'s options) for tests/test_layout.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from flashpoint import ConfigError
from flashpoint.cli import app
from flashpoint.config import Settings
from flashpoint.hosting.server import Server

runner = CliRunner()


def serve_cli(tmp_path: Path, *args: str, api_key_env: str | None = None) -> Any:
    """`flashpoint serve` of an app that does not exist: any key problem must be reported before the app is loaded."""
    env = {"FLASHPOINT_API_KEY": api_key_env, "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}
    missing = str(tmp_path / "no_such_app.py")
    return runner.invoke(app, ["serve", missing, "--port", "0", "--db", str(tmp_path / "jobs.db"), *args], env=env)


def test_a_blank_api_key_option_is_refused_with_what_to_do(tmp_path: Path) -> None:
    result = serve_cli(tmp_path, "--host", "0.0.0.0", "--api-key", " ")
    assert isinstance(result.exception, ConfigError), result.output
    message = str(result.exception)
    assert "--api-key" in message and "blank" in message and "openssl rand" in message


def test_a_blank_api_key_option_is_refused_beside_a_real_one(tmp_path: Path) -> None:
    result = serve_cli(tmp_path, "--api-key", "good", "--api-key", "")
    assert isinstance(result.exception, ConfigError), result.output
    assert "--api-key" in str(result.exception) and "blank" in str(result.exception)


def test_an_api_key_variable_of_only_blanks_is_refused(tmp_path: Path) -> None:
    result = serve_cli(tmp_path, "--host", "0.0.0.0", api_key_env=" , ")
    assert isinstance(result.exception, ConfigError), result.output
    assert "FLASHPOINT_API_KEY is set but holds no key" in str(result.exception)


def test_connection_limits_must_be_positive(tmp_path: Path) -> None:
    for option in ("--max-connections", "--header-timeout-s", "--body-timeout-s"):
        result = serve_cli(tmp_path, option, "0")
        assert isinstance(result.exception, ConfigError), result.output
        assert f"{option} must be positive" in str(result.exception)


def test_the_server_itself_refuses_a_blank_key() -> None:
    for keys in ((" ",), ("good", ""), ("\t",)):
        with pytest.raises(ConfigError, match="blank"):
            Server("app.py", settings=Settings.load({}), host="0.0.0.0", api_keys=keys)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_blank_items_of_the_key_list_are_dropped_and_the_others_stripped(serve: Callable[..., Any]) -> None:
    served = serve("--api-key", "  third  ", env={"FLASHPOINT_API_KEY": " first, ,second "})
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for key in ("first", "second", "third"):
            assert client.get("/v2/echo/health", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        for wrong in ("Bearer first, ,second", "Bearer", "nope"):
            response = client.get("/v2/echo/health", headers={"Authorization": wrong})
            assert response.status_code == 401 and response.json()["code"] == "unauthorized"


def test_allow_pickle_without_a_key_is_refused_with_what_to_do(tmp_path: Path) -> None:
    # a pickled argument runs code on the server: without a key, any local user or web page could send one
    result = serve_cli(tmp_path, "--allow-pickle")
    assert isinstance(result.exception, ConfigError), result.output
    assert "--allow-pickle" in str(result.exception) and "FLASHPOINT_API_KEY" in str(result.exception)
    with pytest.raises(ConfigError, match="allow-pickle without an API key"):
        Server("app.py", settings=Settings.load({}), allow_pickle=True)
    Server("app.py", settings=Settings.load({}), allow_pickle=True, api_keys=("k",))  # with a key it starts


def test_dev_connection_limits_must_be_positive(tmp_path: Path) -> None:
    for option in ("--max-connections", "--header-timeout-s", "--body-timeout-s"):
        result = runner.invoke(app, ["dev", str(tmp_path), option, "0"], env={"FLASHPOINT_API_KEY": None})
        assert isinstance(result.exception, ConfigError), result.output
        assert f"{option} must be positive" in str(result.exception)
