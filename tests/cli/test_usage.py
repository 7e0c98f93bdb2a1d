"""``flashpoint usage`` (decision 0112) against a real server on loopback serving a door plane's ``/v1``: the table
per group in hours, ``--json`` as the server answered it, ``--by``/``--since``/``--app`` passed through, and the
choices it refuses before asking."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import uvicorn

from flashpoint import Endpoint, GpuType
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.runpod import Intake
from flashpoint.api.transport import hardened_protocol
from flashpoint.cli import main
from flashpoint.cli.usage import hours
from tests.scheduler.door import TARGET, Door, open_door

pytestmark = pytest.mark.timeout(60)

KEY = "usage-cli-key"


@pytest_asyncio.fixture
async def served(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> AsyncIterator[tuple[str, Door]]:
    """A door plane whose shop/prod worker was busy 30 s with alice's job after 10 s idle, behind a real server."""
    monkeypatch.setenv("FLASHPOINT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("FLASHPOINT_API_KEY", raising=False)
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    door = await open_door()
    spec = dataclasses.replace(Endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1)).spec, app="shop",
                               app_env="prod")  # fmt: skip
    door.plane.register(spec, TARGET)
    await door.step()
    worker = door.worker("shop.prod.embed")
    await door.pull(worker)
    await door.step(10)
    job = door.submit("shop.prod.embed", extra={"flashpoint": {"submitted_by": "alice"}}).id
    await door.pull(worker)
    await door.step(30)
    await door.finish(worker, job)
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake({}))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(Dispatch(app, door.plane), http=hardened_protocol(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), task
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", door
    server.should_exit = True
    await task
    sock.close()
    await door.plane.close()


async def run(args: list[str]) -> None:
    """The CLI in a thread (it blocks on HTTP), while the server answers on this loop."""

    def call() -> None:
        try:
            main(args)
        except SystemExit as done:
            assert not done.code, done

    await asyncio.to_thread(call)


async def test_usage_prints_hours_per_group(served: tuple[str, Door], capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = served
    await run(["usage", "--url", url, "--key", KEY, "--by", "key"])
    out = capsys.readouterr().out
    assert "by key" in out and "GPU-h busy" in out and "GPU-h idle" in out
    alice = next(line for line in out.splitlines() if "alice" in line)
    assert hours(30) in alice  # 0.0083 h busy
    none = next(line for line in out.splitlines() if "(no key)" in line)
    assert hours(10) in none  # the idle time belongs to no key


async def test_usage_json_is_the_servers_answer(served: tuple[str, Door], capsys: pytest.CaptureFixture[str]) -> None:
    url, door = served
    await run(["usage", "--url", url, "--key", KEY, "--by", "app", "--since", "1h", "--json"])
    (plane,) = json.loads(capsys.readouterr().out)["planes"]
    assert plane["url"] == url and plane["by"] == "app"
    assert plane["since"] == door.clock.time() - 3600
    (shop,) = plane["usage"]
    assert shop["name"] == "shop" and shop["busy"]["gpuSeconds"] == 30 and shop["idle"]["gpuSeconds"] == 10
    await run(["usage", "--url", url, "--key", KEY, "--app", "other", "--json"])
    assert json.loads(capsys.readouterr().out)["planes"][0]["usage"] == []


def test_usage_refuses_a_grouping_it_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["usage", "--by", "color", "--url", "http://127.0.0.1:9"])
    assert done.value.code == 1
    assert "--by 'color': use one of app, env, endpoint, key, model" in capsys.readouterr().err


def test_hours() -> None:
    assert hours(0) == "0.00" and hours(30) == "0.0083" and hours(3600) == "1.00" and hours(5400) == "1.50"
