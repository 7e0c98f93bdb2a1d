"""``flashpoint keys create|list|revoke`` (cli/keys.py): through the CLI runner against ``/v1/keys`` served by uvicorn
on 127.0.0.1 (the native app with the keys router, as ``flashpoint serve`` mounts it), and on a data directory with no
server (``--data-dir``), plus one real ``python -m flashpoint`` process. A key is printed once: by ``create``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from typer.testing import CliRunner

from flashpoint.api.app import create_app
from flashpoint.api.keyroutes import router
from flashpoint.api.runpod import Intake
from flashpoint.cli import app as cli_app
from flashpoint.errors import BadInputError, ConflictError, Error, NotFoundError
from flashpoint.hosting.keystore import TOKEN_PREFIX, KeyStore
from tests.conftest import ROOT
from tests.scheduler.door import open_door

KEY = "cli-admin-key"


class KeyServer:
    """The native app with ``/v1/keys`` over a store in ``root``, served by uvicorn in a thread of its own (its
    plane lives on that thread's loop)."""

    def __init__(self, root: Path) -> None:
        self.store = KeyStore(root)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server: uvicorn.Server | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30) and self.server is not None and self.server.started, "the key server did not start"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        finally:
            self.ready.set()  # a server that failed to start says so at once

    async def _serve(self) -> None:
        door = await open_door()
        app = create_app(door.plane, api_keys=(KEY,), intake=Intake({}))
        app.include_router(router, prefix="/v1")
        app.state.keys = self.store
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        serving = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started and not serving.done():
            await asyncio.sleep(0.01)  # polls uvicorn's own flag on this loop
        self.ready.set()
        try:
            await serving
        finally:
            await door.plane.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture
def key_server(tmp_path: Path) -> Iterator[KeyServer]:
    served = KeyServer(tmp_path / "data" / "keys")
    try:
        yield served
    finally:
        served.close()


def test_create_list_revoke_through_a_server(key_server: KeyServer) -> None:
    runner = CliRunner()
    target = ["--url", key_server.url, "--key", KEY]
    made = runner.invoke(cli_app, ["keys", "create", "--name", "ci", "--scope", "deploy", "--app", "shop",
                                   "--env", "prod", *target])  # fmt: skip
    assert made.exit_code == 0, made.output
    token = next(line for line in made.output.splitlines() if line.startswith(TOKEN_PREFIX))
    assert "key ci (deploy scope for app shop, env prod):" in made.output
    assert "will not be shown again" in made.output
    info = key_server.store.lookup(token)
    assert info is not None and (info.name, info.scope, info.app, info.env) == ("ci", "deploy", "shop", "prod")
    as_json = runner.invoke(cli_app, ["keys", "create", "-n", "ops", "--scope", "admin", "--json", *target])
    assert as_json.exit_code == 0, as_json.output
    ops = json.loads(as_json.output)
    assert ops["key"].startswith(TOKEN_PREFIX) and ops["scope"] == "admin" and ops["created_by"] == "server"

    listed = runner.invoke(cli_app, ["keys", "list", "--json", *target])
    assert [(k["name"], k["scope"], k["app"], k["env"]) for k in json.loads(listed.output)] == [
        ("ci", "deploy", "shop", "prod"),
        ("ops", "admin", None, None),
    ]
    table = runner.invoke(cli_app, ["keys", "list", *target])
    assert table.exit_code == 0, table.output
    assert "ci" in table.output and "deploy" in table.output and "shop" in table.output and "(every)" in table.output
    for shown in (listed.output, table.output):
        assert token not in shown and ops["key"] not in shown

    duplicate = runner.invoke(cli_app, ["keys", "create", "--name", "ci", "--scope", "invoke", *target])
    assert isinstance(duplicate.exception, ConflictError) and "revoke it first" in str(duplicate.exception)
    revoked = runner.invoke(cli_app, ["keys", "revoke", "ci", *target])
    assert revoked.exit_code == 0 and "key ci revoked" in revoked.output
    assert key_server.store.lookup(token) is None
    again = runner.invoke(cli_app, ["keys", "revoke", "ci", *target])
    assert isinstance(again.exception, NotFoundError)


def test_a_wrong_key_or_bad_input_is_the_servers_error(key_server: KeyServer) -> None:
    runner = CliRunner()
    wrong = runner.invoke(cli_app, ["keys", "list", "--url", key_server.url, "--key", "nope"])
    assert isinstance(wrong.exception, Error) and "API key" in str(wrong.exception)
    target = ["--url", key_server.url, "--key", KEY]
    bad = runner.invoke(cli_app, ["keys", "create", "--name", "x", "--scope", "root", *target])
    assert isinstance(bad.exception, BadInputError) and "admin, deploy, invoke" in str(bad.exception)
    no_app = runner.invoke(cli_app, ["keys", "create", "--name", "x", "--scope", "invoke", "--env", "prod", *target])
    assert isinstance(no_app.exception, BadInputError) and "name the app too" in str(no_app.exception)
    assert key_server.store.list() == []


def test_data_dir_acts_on_the_store_with_no_server(tmp_path: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(tmp_path / "data")]
    made = runner.invoke(cli_app, ["keys", "create", "--name", "first", "--scope", "admin", "--json", *data])
    assert made.exit_code == 0, made.output
    body = json.loads(made.output)
    store = KeyStore(tmp_path / "data" / "keys")
    assert store.lookup(body["key"]) is not None and body["created_by"].endswith("(--data-dir)")
    listed = runner.invoke(cli_app, ["keys", "list", *data])
    assert "first" in listed.output and "admin" in listed.output and body["key"] not in listed.output
    assert runner.invoke(cli_app, ["keys", "revoke", "first", *data]).exit_code == 0
    assert store.list() == []
    empty = runner.invoke(cli_app, ["keys", "list", *data])
    assert "no keys" in empty.output
    gone = runner.invoke(cli_app, ["keys", "revoke", "first", *data])
    assert isinstance(gone.exception, NotFoundError)
    hostile = runner.invoke(cli_app, ["keys", "create", "--name", "../x", "--scope", "invoke", *data])
    assert isinstance(hostile.exception, BadInputError) and store.list() == []


def test_a_real_process_prints_the_key_once_and_errors_as_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("FLASHPOINT_URL", "FLASHPOINT_API_KEY")}
        return subprocess.run([sys.executable, "-m", "flashpoint", "keys", *args, "--data-dir", str(tmp_path)],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip

    made = run("create", "--name", "ci", "--scope", "invoke", "--app", "shop")
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[1]
    assert KeyStore(tmp_path / "keys").lookup(token) is not None
    again = run("create", "--name", "ci", "--scope", "invoke")
    assert again.returncode == 1 and again.stderr.startswith("Error: a key named 'ci' exists")
    listed = run("list", "--json")
    assert json.loads(listed.stdout)[0]["name"] == "ci" and token not in listed.stdout


def test_with_no_server_named_or_running_it_says_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an empty state folder (the OS's environment, set for this test): no announcement, so no server to pick
    monkeypatch.setenv("FLASHPOINT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)
    monkeypatch.delenv("FLASHPOINT_API_KEY", raising=False)
    done = CliRunner().invoke(cli_app, ["keys", "list"])
    assert isinstance(done.exception, NotFoundError) and "--url" in str(done.exception)
