"""``flashpoint quota set|list|delete`` (cli/quota.py, decision 0113): through a real server on 127.0.0.1 (``--url``,
``--api-key``: ``--key`` names the quota's key), and on a data directory with no server (``--data-dir``); wrong input
is the server's error saying what to write; ``flashpoint status`` shows the quotas and their use."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from rich.console import Console
from typer.testing import CliRunner

from flashpoint.api.app import create_app
from flashpoint.api.quotaroutes import router
from flashpoint.api.runpod import Intake
from flashpoint.cli import app as cli_app
from flashpoint.cli.status import render
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.hosting.quotastore import QuotaStore
from flashpoint.scheduler.quotas import Quota
from tests.scheduler.door import open_door

KEY = "cli-admin-key"


class QuotaServer:
    """The native app with ``/v1/quotas`` over a store in ``root`` (its plane reads the same), served by uvicorn in a
    thread of its own."""

    def __init__(self, root: Path) -> None:
        self.store = QuotaStore(root)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server: uvicorn.Server | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30) and self.server is not None and self.server.started, "the server did not start"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        finally:
            self.ready.set()

    async def _serve(self) -> None:
        door = await open_door(quotas=self.store)
        app = create_app(door.plane, api_keys=(KEY,), intake=Intake({}))
        app.include_router(router, prefix="/v1")
        app.state.quotas = self.store
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
def quota_server(tmp_path: Path) -> Iterator[QuotaServer]:
    served = QuotaServer(tmp_path / "data" / "quotas")
    try:
        yield served
    finally:
        served.close()


def test_set_list_delete_through_a_server(quota_server: QuotaServer) -> None:
    runner = CliRunner()
    target = ["--url", quota_server.url, "--api-key", KEY]
    made = runner.invoke(cli_app, ["quota", "set", "--app", "shop", "--max-gpus", "4", *target])
    assert made.exit_code == 0, made.output
    assert "quota of app shop: at most 4 GPUs at once" in made.output
    runner.invoke(cli_app, ["quota", "set", "--app", "shop", "--model", "H100", "--max-gpus", "2", *target])
    budget = runner.invoke(cli_app, ["quota", "set", "--app", "shop", "--gpu-hours", "10", *target])
    assert budget.exit_code == 0, budget.output
    assert "10 GPU-hours per 24h" in budget.output  # the default period
    keyed = runner.invoke(cli_app, ["quota", "set", "--key", "ci", "--max-gpus", "1", "--json", *target])
    assert json.loads(keyed.output)["key"] == "ci"
    assert quota_server.store.list() == [
        Quota(key="ci", max_gpus=1),
        Quota(app="shop", max_gpus=4, models=(("NVIDIA H100 80GB HBM3", 2),), gpu_hours=10.0),
    ]

    listed = runner.invoke(cli_app, ["quota", "list", "--json", *target])
    rows = json.loads(listed.output)
    assert [(r["app"], r["key"], r["use"]["gpus"]) for r in rows] == [(None, "ci", 0), ("shop", None, 0)]
    table = runner.invoke(cli_app, ["quota", "list", *target])
    assert table.exit_code == 0, table.output
    assert "holds 0 of 4 GPUs" in table.output and "GPU-hours (24h)" in table.output

    one_model = runner.invoke(cli_app, ["quota", "delete", "--app", "shop", "--model", "H100", *target])
    assert one_model.exit_code == 0, one_model.output
    assert quota_server.store.list()[1].models == ()
    gone = runner.invoke(cli_app, ["quota", "delete", "--app", "shop", *target])
    assert gone.exit_code == 0 and "quota of app shop deleted" in gone.output
    again = runner.invoke(cli_app, ["quota", "delete", "--app", "shop", *target])
    assert isinstance(again.exception, NotFoundError)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-gpus", "1"], "say whose quota it is: --app A"),
        (["--app", "shop", "--gpu-hours", "1", "--period", "forever"], "30m, 1h, 24h, 7d or 2w"),
        (["--app", "shop", "--model", "H100"], "give --max-gpus N with it"),
        (["--app", "sh op", "--max-gpus", "1"], "--app is a name of letters"),
    ],
)
def test_wrong_input_is_the_servers_error_saying_what_to_write(
    quota_server: QuotaServer, args: list[str], says: str
) -> None:
    bad = CliRunner().invoke(cli_app, ["quota", "set", *args, "--url", quota_server.url, "--api-key", KEY])
    assert isinstance(bad.exception, BadInputError) and says in str(bad.exception)
    assert quota_server.store.list() == []


def test_data_dir_acts_on_the_store_with_no_server(tmp_path: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(tmp_path / "data")]
    made = runner.invoke(cli_app, ["quota", "set", "--app", "shop", "--env", "prod", "--max-gpus", "2", *data])
    assert made.exit_code == 0, made.output
    assert QuotaStore(tmp_path / "data" / "quotas").list() == [Quota(app="shop", env="prod", max_gpus=2)]
    listed = runner.invoke(cli_app, ["quota", "list", *data])
    assert "shop" in listed.output and "(ask the server)" in listed.output
    deleted = runner.invoke(cli_app, ["quota", "delete", "--app", "shop", "--env", "prod", *data])
    assert deleted.exit_code == 0, deleted.output
    assert runner.invoke(cli_app, ["quota", "list", *data]).output.startswith("no quotas")


def test_status_shows_the_quotas_and_their_use() -> None:
    body = {
        "source": "flashpoint serve (pid 1, http://127.0.0.1:1)",
        "kind": "server",
        "endpoints": [],
        "gpus": {"total": 0, "held": 0, "free": 0},
        "models": [],
        "quotas": [
            {**Quota(app="shop", max_gpus=4, gpu_hours=10.0).to_json(),
             "use": {"gpus": 3, "models": {}, "gpuHours": 10.5, "spent": True, "renewsAt": 1_800_000_000.0}},
        ],
    }  # fmt: skip
    out = Console(width=200, record=True)
    out.print(render([body], []))
    text = out.export_text()
    assert "holds 3 of 4 GPUs" in text
    assert "10.50 of 10 GPU-hours (24h), spent until 2027-01-15 08:00:00 UTC" in text
