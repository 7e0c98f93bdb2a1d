"""``flashpoint deploy``, ``app``, ``env``, ``undeploy``, ``rollback`` and ``flashpoint.deploy`` against a real, empty
``flashpoint serve --data-dir D`` process (decisions 0097 and 0101): a project deployed, called, changed, deployed
again, rolled back and taken down; the folder check; and each refusal the server makes, as the CLI prints it."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import flashpoint
from flashpoint.cli import app as cli_app
from flashpoint.errors import BadInputError, ConfigError, ConflictError, ForbiddenError, NotFoundError
from flashpoint.sdk.deploy import DeployError, DeployTimeoutError
from tests.conftest import SERVER_GPUS, start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEY = "deploy-test-key"
PROJECT = textwrap.dedent(
    """
    from flashpoint import Endpoint, GpuType

    @Endpoint(name="echo", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    async def echo(data: dict) -> dict:
        return {"version": VERSION, "data": data}

    VERSION = 1
    """
)

runner = CliRunner()


class Server:
    """A running ``flashpoint serve --data-dir`` with no app, announced under ``state``."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.state = tmp_path / "state"
        env = {
            **os.environ,
            "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
            "FLASHPOINT_API_KEY": KEY,
            "FLASHPOINT_STATE_DIR": str(self.state),
        }
        command = [sys.executable, "-m", "flashpoint", "serve", "--data-dir", str(tmp_path / "data"), "--port", "0"]
        self.proc, self.url = start_serve_process([*command, *args], env)

    def cli(self, *args: str, url: bool = True, key: str | None = KEY, input: str | None = None) -> Any:
        """The CLI in this process; ``url=False`` finds the server through its announcement. With ``key=None`` the
        CLI looks in another state folder: it would take the key of the server's announcement."""
        state = self.state if key is not None else self.state.parent / "elsewhere"
        env = {"FLASHPOINT_STATE_DIR": str(state), "FLASHPOINT_URL": None, "FLASHPOINT_API_KEY": None}
        target = ["--url", self.url, *(["--key", key] if key is not None else [])] if url else []
        return runner.invoke(cli_app, [*args, *target], env=env, input=input)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*args: str) -> Server:
        started.append(Server(tmp_path, *args))
        return started[-1]

    yield start
    for s in started:
        stop_process(s.proc)


def project(root: Path, version: int = 1) -> Path:
    root.mkdir(exist_ok=True)
    (root / "app.py").write_text(PROJECT.replace("VERSION = 1", f"VERSION = {version}"))
    return root


def ok(result: Any) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    out: str = result.stdout
    return out


def call(url: str, data: dict[str, Any]) -> Any:
    body = {"input": {"data": data}}
    answer = httpx.post(f"{url}/runsync", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    answer.raise_for_status()
    return answer.json()["output"]


def test_deploy_call_change_redeploy_rollback_undeploy(
    server: Callable[..., Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = server()
    shop = project(tmp_path / "shop")

    # Given an empty server, the app list says how to deploy
    assert "no apps deployed" in ok(s.cli("app", "list"))

    # When the folder is deployed with the defaults (app: the folder's name, env production), found by announcement
    first = json.loads(ok(s.cli("deploy", str(shop), "--json", url=False)))
    assert first["app"] == "shop" and first["env"] == "production" and first["version"] == 1
    (echo,) = first["endpoints"]
    assert echo == {"name": "echo", "id": "shop.production.echo", "kind": "queue",
                    "url": f"{s.url}/v2/shop.production.echo"}  # fmt: skip
    assert call(echo["url"], {"x": 1}) == {"version": 1, "data": {"x": 1}}

    # Then env get, from inside the folder, shows it serving and says the folder is its code
    monkeypatch.chdir(shop)
    shown = ok(s.cli("env", "get", "production"))
    assert "shop/production: version 1 serves" in shown and "shop.production.echo" in shown
    assert "this folder is version 1's code" in shown
    (shop / "app.py").write_text(PROJECT.replace("VERSION = 1", "VERSION = 2"))
    differs = ok(s.cli("env", "get", "production"))
    assert "this folder differs from version 1 (production): run flashpoint deploy" in differs
    assert "this folder differs from version 1" in ok(s.cli("app", "get", "shop"))

    # When the change is deployed (progress printed by stage), version 2 serves
    second = ok(s.cli("deploy"))
    assert "upload: " in second and "version 2" in second and "shop/production version 2 serves" in second
    assert call(echo["url"], {"x": 2}) == {"version": 2, "data": {"x": 2}}

    # A rollback serves version 1 again, with no new number
    back = json.loads(ok(s.cli("rollback", "--json")))
    assert back["version"] == 1
    assert call(echo["url"], {"x": 3})["version"] == 1
    assert "2       " not in ok(s.cli("env", "get", "production", "--app", "shop")).split("versions")[0]

    # Undeploying the endpoint (confirmed with --force) takes it down; the versions stay
    gone = ok(s.cli("undeploy", "echo", "--force"))
    assert "took down endpoint echo of shop/production" in gone
    env = json.loads(ok(s.cli("env", "get", "production", "--json")))
    assert env["env"]["removed"] == ["echo"] and len(env["versions"]) == 2

    # The environment and the app can be forgotten
    assert "environment production of app shop deleted" in ok(s.cli("env", "delete", "production", "-f"))
    assert isinstance(s.cli("env", "get", "production").exception, NotFoundError)


def test_env_create_list_and_app_delete(server: Callable[..., Server]) -> None:
    s = server()
    assert "environment staging of app shop created" in ok(s.cli("env", "create", "staging", "--app", "shop"))
    listed = json.loads(ok(s.cli("env", "list", "--app", "shop", "--json")))
    assert [(e["name"], e["serving"]) for e in listed["envs"]] == [("staging", None)]
    assert "shop/staging: nothing serves" in ok(s.cli("env", "get", "staging", "-a", "shop"))
    assert [a["name"] for a in json.loads(ok(s.cli("app", "list", "--json")))["apps"]] == ["shop"]
    assert "app shop deleted" in ok(s.cli("app", "delete", "shop", "--yes"))
    assert json.loads(ok(s.cli("app", "list", "--json")))["apps"] == []


def test_python_api_deploys_and_returns_what_json_prints(server: Callable[..., Server], tmp_path: Path) -> None:
    s = server()
    stages: list[str] = []
    result = flashpoint.deploy(project(tmp_path / "shop"), env="staging", url=s.url, key=KEY,
                               on_stage=lambda step: stages.append(step.stage))  # fmt: skip
    assert (result.app, result.env, result.version) == ("shop", "staging", 1)
    assert result.to_json()["endpoints"][0]["id"] == "shop.staging.echo"
    assert stages[0] == "upload" and stages[-1] == "done"


# --------------------------------------------------------------------------------------------------------------------
# refusals, one per status, as the CLI shows them


def test_404_an_app_not_deployed(server: Callable[..., Server]) -> None:
    result = server().cli("app", "get", "nowhere")
    assert isinstance(result.exception, NotFoundError)
    assert "app 'nowhere' is not deployed; deploy it first with 'flashpoint deploy'" in str(result.exception)


def test_401_no_key_and_a_wrong_key(server: Callable[..., Server], tmp_path: Path) -> None:
    s = server()
    missing = s.cli("deploy", str(project(tmp_path / "shop")), key=None)
    assert isinstance(missing.exception, ConfigError) and "needs an API key: pass --key" in str(missing.exception)
    wrong = s.cli("app", "list", key="not-the-key")
    assert isinstance(wrong.exception, ConfigError) and "refused the API key" in str(wrong.exception)


def test_400_a_project_that_does_not_load_quotes_its_error(server: Callable[..., Server], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "app.py").write_text("import no_such_module_here\n")
    result = server().cli("deploy", str(broken))
    assert isinstance(result.exception, flashpoint.Error) and not isinstance(result.exception, DeployError)
    assert "No module named 'no_such_module_here'" in str(result.exception)


def test_413_an_upload_over_the_servers_limit(server: Callable[..., Server], tmp_path: Path) -> None:
    s = server("--max-artifact-mb", "0.01")
    big = project(tmp_path / "big")
    (big / "weights.bin").write_bytes(os.urandom(64 * 1024))  # random: it does not compress below the limit
    result = s.cli("deploy", str(big))
    assert isinstance(result.exception, BadInputError) and result.exception.code == "payload_too_large"


def test_403_a_key_without_the_deploy_scope(server: Callable[..., Server], tmp_path: Path) -> None:
    s = server()
    made = json.loads(ok(s.cli("keys", "create", "--name", "caller", "--scope", "invoke", "--app", "shop", "--json")))
    result = s.cli("deploy", str(project(tmp_path / "shop")), key=made["key"])
    assert isinstance(result.exception, ForbiddenError) and "deploy" in str(result.exception)


SLOW_START = PROJECT.replace(
    "from flashpoint import Endpoint, GpuType",
    "import os, time\nfrom flashpoint import Endpoint, GpuType\nif os.environ.get('FLASHPOINT_GPU_MODEL'):\n"
    "    time.sleep(8)  # inside a worker only: the rollout waits in 'warm'",
).replace("workers=(0, 1)", "workers=(1, 1)")


def test_409_while_another_rollout_of_the_env_runs(server: Callable[..., Server], tmp_path: Path) -> None:
    s = server()
    slow = tmp_path / "shop"
    slow.mkdir()
    (slow / "app.py").write_text(SLOW_START)
    started = s.cli("deploy", str(slow), "--timeout", "0.5")  # gives up following; the rollout goes on
    assert isinstance(started.exception, DeployTimeoutError), started.output
    again = s.cli("deploy", str(slow))
    assert isinstance(again.exception, ConflictError)
