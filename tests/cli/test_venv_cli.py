"""``flashpoint venv list|prune`` through typer's CliRunner, plus one real subprocess, on environments laid out by hand
(tests/e2e/test_environments.py prunes real ones).

Covers ``flashpoint.cli.venv`` (``flashpoint venv``) for tests/test_layout.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from flashpoint.cli import app
from flashpoint.environments import BuildFailure, BuildProgress, EnvironmentCache
from flashpoint.environments.lock import KeyLock
from flashpoint.environments.records import write_json
from tests.environments.test_cache import DAY, lay_out

runner = CliRunner()


def make_cache(tmp_path: Path) -> EnvironmentCache:
    root = tmp_path / "envs"
    root.mkdir()
    return EnvironmentCache(root, pip_config={})


def test_list_empty(tmp_path: Path) -> None:
    result = runner.invoke(app, ["venv", "list", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"No environments in {tmp_path}" in result.output


def test_list_table_and_json(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    now = time.time()  # the CLI reads the real clock: records are laid out relative to it
    old = lay_out(cache, ["six==1.15.0"], last_used=now - 3 * DAY, endpoints=("legacy",))
    new = lay_out(cache, ["attrs", "six==1.16.0"], last_used=now - 60, endpoints=("a", "b"))
    failed = cache.key(["nope==1"])
    failure = BuildFailure(failed, ("nope==1",), "c", now - 120, "could not build", 1, ("x", "error: nope", "  cause"))
    write_json(cache.root / f"{failed}.failed", failure.to_json())
    building = cache.key(["torch==2.3.1"])
    write_json(
        cache.root / f"{building}.building",
        BuildProgress(building, 4242, now - 12, "d", ("torch==2.3.1",), "Downloading torch", 7).to_json(),
    )
    with KeyLock(cache.root / f"{building}.lock"):  # a build in progress holds its key's lock
        table = runner.invoke(app, ["venv", "list", "--dir", str(cache.root)])
        as_json = runner.invoke(app, ["venv", "list", "--dir", str(cache.root), "--json"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    row_new = next(line for line in lines if new in line)
    row_old = next(line for line in lines if old in line)
    assert lines.index(row_new) < lines.index(row_old)  # most recently used first
    assert "attrs" in row_new and "a, b" in row_new and "cpython-3." in row_new and "KiB" in row_new
    assert "six==1.15.0" in row_old and "3 days ago" in row_old and "legacy" in row_old
    assert f"building {building} for 'd' (process 4242," in table.output and "Downloading torch" in table.output
    assert f"failed {failed} (nope==1) for 'c', 2 min ago: error: nope cause" in table.output
    assert "flashpoint venv prune --failed" in table.output

    body = json.loads(as_json.output)
    assert body["root"] == str(cache.root)
    assert [e["key"] for e in body["environments"]] == [new, old]
    assert body["environments"][0]["requirements"] == ["attrs", "six==1.16.0"]
    assert body["environments"][0]["endpoints"] == ["a", "b"] and body["environments"][0]["size"] > 5000
    assert [b["key"] for b in body["building"]] == [building] and body["building"][0]["pid"] == 4242
    assert [f["key"] for f in body["failed"]] == [failed]


def test_prune_days_all_and_failed(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    now = time.time()
    stale = lay_out(cache, ["six==1.15.0"], last_used=now - 10 * DAY)
    fresh = lay_out(cache, ["six==1.16.0"], last_used=now - DAY)
    failed = cache.key(["nope==1"])
    write_json(cache.root / f"{failed}.failed", BuildFailure(failed, (), "c", now, "x", 1, ()).to_json())

    result = runner.invoke(app, ["venv", "prune", "--days", "7", "--dir", str(cache.root)])
    assert result.exit_code == 0, result.output
    assert f"removed {stale}" in result.output and "1 removed, 0 busy" in result.output
    assert [e.key for e in cache.entries()] == [fresh] and cache.failure(failed) is not None

    result = runner.invoke(app, ["venv", "prune", "--failed", "--dir", str(cache.root)])
    assert result.exit_code == 0, result.output
    assert f"forgot the failed build {failed}" in result.output and cache.failure(failed) is None

    with KeyLock(cache.root / f"{fresh}.lock"):  # being built: left alone and named
        result = runner.invoke(app, ["venv", "prune", "--all", "--dir", str(cache.root)])
    assert f"kept {fresh}: it is being built" in result.output and "0 removed, 1 busy" in result.output
    result = runner.invoke(app, ["venv", "prune", "--all", "--dir", str(cache.root)])
    assert f"removed {fresh}" in result.output and cache.entries() == []


def test_list_and_prune_show_an_environment_in_use(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    now = time.time()
    held_key = lay_out(cache, ["six==1.16.0"], last_used=now - 10 * DAY)
    idle = lay_out(cache, ["six==1.15.0"], last_used=now - 20 * DAY)
    held = cache.ensure(["six==1.16.0"], endpoint="a", hold=True)  # as a plane holds what its workers run in
    assert held.key == held_key

    table = runner.invoke(app, ["venv", "list", "--dir", str(cache.root)])
    assert table.exit_code == 0, table.output
    header = next(line for line in table.output.splitlines() if "requirements" in line)
    assert header.rstrip(" │┃|").endswith("in use")
    assert next(line for line in table.output.splitlines() if held_key in line).rstrip(" │┃|").endswith("yes")
    assert next(line for line in table.output.splitlines() if idle in line).rstrip(" │┃|").endswith("no")
    assert "leaves it alone until that plane stops" in table.output
    body = json.loads(runner.invoke(app, ["venv", "list", "--dir", str(cache.root), "--json"]).output)
    assert {e["key"]: e["in_use"] for e in body["environments"]} == {held_key: True, idle: False}

    result = runner.invoke(app, ["venv", "prune", "--all", "--dir", str(cache.root)])
    assert result.exit_code == 0, result.output
    assert f"removed {idle}" in result.output
    assert f"kept {held_key}: in use by a running control plane" in result.output
    assert "stop the plane that uses it" in result.output and "1 removed, 0 busy, 1 in use" in result.output
    assert [e.key for e in cache.entries()] == [held_key]

    held.release()  # the plane stopped
    result = runner.invoke(app, ["venv", "prune", "--all", "--dir", str(cache.root)])
    assert f"removed {held_key}" in result.output and "1 removed, 0 busy, 0 in use" in result.output
    assert cache.entries() == []


def test_prune_without_a_choice_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["venv", "prune", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--days N, --all or --failed" in result.output


def test_the_default_directory_comes_from_the_environment(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    key = lay_out(cache, ["six==1.16.0"], last_used=time.time())
    result = runner.invoke(app, ["venv", "list", "--json"], env={"FLASHPOINT_ENV_DIR": str(cache.root)})
    assert [e["key"] for e in json.loads(result.output)["environments"]] == [key]


def test_a_real_subprocess(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    key = lay_out(cache, ["six==1.16.0"], last_used=time.time() - 30 * DAY)
    env = {**os.environ, "FLASHPOINT_ENV_DIR": str(cache.root)}
    done = subprocess.run(
        [sys.executable, "-m", "flashpoint", "venv", "prune", "--days", "1"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert f"removed {key}" in done.stdout and cache.entries() == []
