"""Per-endpoint environments built for real: uv installs small pure-Python packages from the registry (through this
machine's pip configuration), real subprocesses of each environment's interpreter import them, real processes race
for one key's lock, and a builder is killed mid-build.

Slow (each build runs uv; a second or so with a warm uv cache). Without the registry: skipped locally, failed in CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashpoint.cli import app
from flashpoint.environments import Environment, EnvironmentBuildError, EnvironmentCache
from flashpoint.environments.lock import KeyLock
from flashpoint.environments.records import EnvironmentRecord, read_json, write_json
from tests.flashvenv import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MISSING = "flashpoint-no-such-package-xyz==1.0"

#: a child that builds one environment: says it is ready, then prints what ensure returned
BUILDER = """
import json, os, sys
from flashpoint.environments import EnvironmentCache
cache = EnvironmentCache(sys.argv[1])
print("ready", flush=True)
env = cache.ensure(sys.argv[2:], endpoint=f"process-{os.getpid()}")
print(json.dumps({"built": env.built, "python": str(env.python), "builds": cache.builds}), flush=True)
"""

#: a child whose build stops at the installer's first output line (on_line blocks), to be killed there
STALLED = """
import sys
from flashpoint.environments import EnvironmentCache
seen = []
def on_line(line):
    seen.append(line)
    print(line, flush=True)
    if len(seen) == 2:  # ours ("building environment ..."), then uv's first: uv pip install is running now
        sys.stdin.read()
EnvironmentCache(sys.argv[1]).ensure(sys.argv[2:], endpoint="doomed", on_line=on_line)
"""


@pytest.fixture(scope="module", autouse=True)
def registry() -> None:
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
    except OSError as exc:
        unavailable(f"the package registry (pypi.org) is unreachable: {exc}")


@pytest.fixture
def cache(tmp_path: Path) -> EnvironmentCache:
    return EnvironmentCache(tmp_path / "envs")


def host_distributions() -> list[dict[str, str]]:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return sorted(json.loads(listed.stdout), key=lambda d: d["name"])


def run_in(env: Environment, code: str, *, pythonpath: list[str] | None = None) -> str:
    """Run ``code`` with the environment's interpreter, as a worker would start there."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if pythonpath is not None:
        clean["PYTHONPATH"] = os.pathsep.join(pythonpath)
    done = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, env=clean, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_conflicting_pins_each_see_their_own_and_the_host_is_untouched(cache: EnvironmentCache) -> None:
    # Given the host's installed distributions
    before = host_distributions()
    # When two endpoints need conflicting pins of one package
    new = cache.ensure(["six==1.16.0"], endpoint="new")
    old = cache.ensure(["six==1.15.0"], endpoint="old")
    # Then each environment's interpreter imports its own, and flashpoint (inherited from the host) too
    check = "import six, flashpoint.worker.runtime, sys; print(six.__version__, sys.prefix)"
    assert run_in(new, check) == f"1.16.0 {new.path}"
    assert run_in(old, check) == f"1.15.0 {old.path}"
    # and the pins still win when the worker's PYTHONPATH is the parent's path, filtered as the plane must filter it
    assert run_in(old, check, pythonpath=old.pythonpath(sys.path)) == f"1.15.0 {old.path}"
    assert new.key != old.key and new.built and old.built and cache.builds == 2
    assert (new.site_packages / "six.py").is_file() and new.requirements == ("six==1.16.0",)
    # and the host did not change
    assert host_distributions() == before


def test_the_second_ensure_is_a_hit_in_this_process_and_others(cache: EnvironmentCache) -> None:
    first = cache.ensure(["six==1.16.0"], endpoint="a")
    second = cache.ensure(["SIX==1.16.0"], endpoint="b")
    assert first.built and not second.built and cache.builds == 1
    assert second == Environment(**{**first.__dict__, "built": False})
    elsewhere = EnvironmentCache(cache.root)  # another process's view: the same files
    assert not elsewhere.ensure(["six==1.16.0"], endpoint="c").built and elsewhere.builds == 0
    record = EnvironmentRecord.from_json(read_json(cache.root / f"{first.key}.json") or {})
    assert record.endpoints == ("a", "b", "c")


def test_progress_can_be_read_while_building(cache: EnvironmentCache) -> None:
    key = cache.key(["six==1.16.0"])
    seen: list[tuple[str, str | None]] = []

    def on_line(line: str) -> None:
        progress = cache.building(key)  # what another process would read now
        seen.append((line, progress.last_line if progress else None))

    cache.ensure(["six==1.16.0"], endpoint="a", on_line=on_line)
    assert seen and all(line == last for line, last in seen)
    assert seen[0][0].startswith(f"building environment {key} for endpoint 'a'")
    assert any("six==1.16.0" in line for line, _ in seen[1:])  # uv's "+ six==1.16.0"
    assert cache.building(key) is None and not (cache.root / f"{key}.building").exists()


def test_the_renamed_environment_runs_its_scripts(cache: EnvironmentCache) -> None:
    # built in a temporary directory and renamed: a console script must still find its interpreter
    env = cache.ensure(["pyjokes==0.8.3"], endpoint="a")
    done = subprocess.run([str(env.path / "bin" / "pyjokes")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert ".tmp-" not in (env.path / "bin" / "pyjokes").read_text()


def test_a_failed_build_is_recorded_raised_again_and_retried(cache: EnvironmentCache) -> None:
    lines: list[str] = []
    with pytest.raises(EnvironmentBuildError) as first:
        cache.ensure([MISSING], endpoint="a", on_line=lines.append)
    key = cache.key([MISSING])
    assert not first.value.recorded and first.value.key == key and first.value.returncode not in (None, 0)
    assert any("flashpoint-no-such-package-xyz" in line for line in first.value.output_tail)
    assert "flashpoint-no-such-package-xyz" in str(first.value) and "retry" in str(first.value)
    assert len(first.value.output_tail) <= 40 and lines[-len(first.value.output_tail) :] == list(
        first.value.output_tail
    )
    assert sorted(p.name for p in cache.root.iterdir()) == [f"{key}.failed", f"{key}.lock"]  # nothing half-built

    # the next ensure raises the record without running uv
    with pytest.raises(EnvironmentBuildError) as again:
        cache.ensure([MISSING], endpoint="b")
    assert again.value.recorded and again.value.output_tail == first.value.output_tail and cache.builds == 1
    # a different requirement set is a different key: it builds
    assert cache.ensure(["six==1.16.0"], endpoint="b").built and cache.builds == 2
    # retry=True runs uv again
    with pytest.raises(EnvironmentBuildError) as retried:
        cache.ensure([MISSING], endpoint="a", retry=True)
    assert not retried.value.recorded and cache.builds == 3
    # and so does forgetting the failures from the command line
    result = CliRunner().invoke(app, ["venv", "prune", "--failed", "--dir", str(cache.root)])
    assert f"forgot the failed build {key}" in result.output
    with pytest.raises(EnvironmentBuildError) as after_prune:
        cache.ensure([MISSING], endpoint="a")
    assert not after_prune.value.recorded and cache.builds == 4


@contextlib.contextmanager
def builders(root: Path, requirements: list[str], count: int) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [
        subprocess.Popen([sys.executable, "-c", BUILDER, str(root), *requirements], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


def test_two_processes_build_one_key_once(cache: EnvironmentCache) -> None:
    # Given the key's lock held here, so that both processes arrive while it is taken
    cache.root.mkdir(parents=True)
    key = cache.key(["six==1.15.0"])
    lock = KeyLock(cache.root / f"{key}.lock")
    lock.acquire()
    with builders(cache.root, ["six==1.15.0"], 2) as procs:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        # When the lock is let go, they race for it
        lock.release()
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=150)
            assert proc.returncode == 0
            results.append(json.loads(out.strip().splitlines()[-1]))
    # Then exactly one built and both got the same environment
    assert sorted(r["built"] for r in results) == [False, True]
    assert sorted(r["builds"] for r in results) == [0, 1]
    assert {r["python"] for r in results} == {str(cache.root / key / "bin" / "python")}
    assert [e.key for e in cache.entries()] == [key]


def test_two_threads_build_one_key_once(cache: EnvironmentCache) -> None:
    results: list[Environment] = []
    threads = [
        threading.Thread(target=lambda name=name: results.append(cache.ensure(["six==1.15.0"], endpoint=name)))
        for name in ("a", "b", "c")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.builds == 1 and sorted(e.built for e in results) == [False, False, True]
    assert len({e.python for e in results}) == 1


def test_a_killed_builder_leaves_nothing_that_looks_done(cache: EnvironmentCache) -> None:
    # Given a builder (and its uv) killed outright while uv installs
    key = cache.key(["six==1.16.0"])
    with subprocess.Popen(
        [sys.executable, "-c", STALLED, str(cache.root), "six==1.16.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("building environment")
        assert proc.stdout.readline()
        assert cache.building(key) is not None  # alive: its lock is held
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # Then what it left is not an environment: no directory under the key, a progress record nobody reports
    assert not (cache.root / key).exists()
    assert [p.name for p in cache.root.iterdir() if p.name.startswith(f".{key}.tmp-")]
    assert (cache.root / f"{key}.building").exists() and cache.building(key) is None
    # and the next ensure builds it, clearing the leftovers
    env = cache.ensure(["six==1.16.0"], endpoint="a")
    assert env.built and cache.builds == 1
    assert sorted(p.name for p in cache.root.iterdir()) == [key, f"{key}.json", f"{key}.lock"]


def test_list_and_prune_real_environments(cache: EnvironmentCache) -> None:
    runner = CliRunner()
    kept = cache.ensure(["six==1.16.0"], endpoint="a")
    stale = cache.ensure(["six==1.15.0"], endpoint="b")
    listed = json.loads(runner.invoke(app, ["venv", "list", "--dir", str(cache.root), "--json"]).output)
    assert {e["key"] for e in listed["environments"]} == {kept.key, stale.key}
    assert all(e["size"] > 10_000 for e in listed["environments"])  # six, and the interpreter's link
    # Given one environment last used 30 days ago (its record edited, as a month of disuse would leave it)
    path = cache.root / f"{stale.key}.json"
    record = read_json(path) or {}
    write_json(path, {**record, "last_used": record["last_used"] - 30 * 86400})
    result = runner.invoke(app, ["venv", "prune", "--days", "7", "--dir", str(cache.root)])
    assert result.exit_code == 0 and f"removed {stale.key}" in result.output
    assert [e.key for e in cache.entries()] == [kept.key]
    result = runner.invoke(app, ["venv", "prune", "--all", "--dir", str(cache.root)])
    assert f"removed {kept.key}" in result.output and cache.entries() == []
    # a pruned environment is simply built again
    assert cache.ensure(["six==1.16.0"], endpoint="a").built
