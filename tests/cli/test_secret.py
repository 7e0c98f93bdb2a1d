"""``flashpoint secret set|list|delete`` (cli/secret.py) against a real ``flashpoint serve --data-dir`` process: the
value comes from stdin, never an argument, lands 0600 in the data directory, and is printed by no command."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashpoint.cli import app as cli_app
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.hosting.secretstore import SecretStore
from tests.conftest import ROOT, SERVER_GPUS, start_serve_process, stop_process

KEY = "cli-test-key"
VALUE = "s3cret-from-stdin-4242"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS, "FLASHPOINT_API_KEY": KEY,
           "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
    command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/runpod_app.py"), "--port", "0",
               "--db", str(tmp_path / "jobs.db"), "--data-dir", str(tmp_path / "data")]  # fmt: skip
    proc, url = start_serve_process(command, env)
    yield url
    stop_process(proc)


def cli(url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLASHPOINT_URL": url, "FLASHPOINT_API_KEY": KEY}
    return subprocess.run(
        [sys.executable, "-m", "flashpoint", "secret", *args],
        input=stdin,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_set_list_delete_through_a_real_server(server: str, tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "data" / "secrets")
    said = []
    done = cli(server, "set", "HF_TOKEN", stdin=VALUE + "\n")  # as `echo "$VALUE" | flashpoint secret set`
    assert done.returncode == 0, done.stderr
    said.append(done.stdout + done.stderr)
    assert store.resolve("HF_TOKEN") == VALUE  # one final line break dropped
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    done = cli(server, "set", "HF_TOKEN", "--app", "shop", stdin="for-shop")
    assert done.returncode == 0, done.stderr
    assert store.resolve("HF_TOKEN", app="shop") == "for-shop"

    listed = cli(server, "list", "--json")
    said.append(listed.stdout + listed.stderr)
    assert [(s["name"], s["app"]) for s in json.loads(listed.stdout)] == [("HF_TOKEN", None), ("HF_TOKEN", "shop")]
    human = cli(server, "list")
    said.append(human.stdout + human.stderr)
    assert "HF_TOKEN" in human.stdout and "server-wide" in human.stdout and "app shop" in human.stdout

    deleted = cli(server, "delete", "HF_TOKEN", "--app", "shop")
    assert deleted.returncode == 0 and store.resolve("HF_TOKEN", app="shop") == VALUE
    again = cli(server, "delete", "HF_TOKEN", "--app", "shop")
    assert again.returncode == 1 and "no secret 'HF_TOKEN'" in again.stderr
    assert not any(VALUE in text or "for-shop" in text for text in said)


@pytest.mark.slow
def test_a_value_is_never_an_argument_and_never_empty(server: str, tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "data" / "secrets")
    as_argument = cli(server, "set", "HF_TOKEN", VALUE)
    assert as_argument.returncode == 2  # typer's usage error: the extra argument is refused
    assert VALUE not in as_argument.stdout
    empty = cli(server, "set", "HF_TOKEN", stdin="")
    assert empty.returncode == 1 and "no value" in empty.stderr
    bad = cli(server, "set", "../etc/passwd", stdin=VALUE)
    assert bad.returncode == 1 and "secret's name" in bad.stderr and VALUE not in bad.stderr
    assert store.list() == []


def test_data_dir_acts_on_the_store_with_no_server(tmp_path: Path) -> None:
    # Given no server at all: --data-dir is the store itself (a server that refused to start for a secret it lacks)
    data = str(tmp_path / "data")
    runner = CliRunner()
    done = runner.invoke(cli_app, ["secret", "set", "HF_TOKEN", "--data-dir", data], input=VALUE + "\n")
    assert done.exit_code == 0, done.output
    done = runner.invoke(cli_app, ["secret", "set", "HF_TOKEN", "--app", "shop", "--data-dir", data], input="s")
    assert done.exit_code == 0, done.output
    store = SecretStore(tmp_path / "data" / "secrets")
    assert store.resolve("HF_TOKEN") == VALUE and store.resolve("HF_TOKEN", app="shop") == "s"
    listed = runner.invoke(cli_app, ["secret", "list", "--json", "--data-dir", data])
    assert [(s["name"], s["app"]) for s in json.loads(listed.output)] == [("HF_TOKEN", None), ("HF_TOKEN", "shop")]
    assert VALUE not in listed.output
    human = runner.invoke(cli_app, ["secret", "list", "--data-dir", data])
    assert "HF_TOKEN  server-wide  created " in human.output and VALUE not in human.output
    assert runner.invoke(cli_app, ["secret", "delete", "HF_TOKEN", "--data-dir", data]).exit_code == 0
    gone = runner.invoke(cli_app, ["secret", "delete", "HF_TOKEN", "--data-dir", data])
    assert isinstance(gone.exception, NotFoundError)
    assert store.resolve("HF_TOKEN") is None and store.resolve("HF_TOKEN", app="shop") == "s"
    empty = runner.invoke(cli_app, ["secret", "set", "X", "--data-dir", data], input="")
    assert isinstance(empty.exception, BadInputError)
    bad = runner.invoke(cli_app, ["secret", "set", "a/b", "--data-dir", data], input=VALUE)
    assert isinstance(bad.exception, BadInputError) and store.resolve("X") is None
