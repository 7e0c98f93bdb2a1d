"""The environment cache without the installer: records, the lock across threads and processes, hits, recorded failures,
progress and pruning, on environments laid out by hand. Real builds are in tests/e2e/test_environments.py (slow).

Covers ``flashpoint.environments.errors`` (the build errors) for tests/test_layout.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flashpoint.environments import (
    BuildFailure,
    BuildProgress,
    Environment,
    EnvironmentBuildError,
    EnvironmentCache,
    EnvironmentRecord,
    default_root,
)
from flashpoint.environments.build import env_python
from flashpoint.environments.lock import KeyLock, is_locked
from flashpoint.environments.records import bounded_tail, read_json, write_json

DAY = 86400.0


class Clock:
    """The injected clock (the only thing faked here): seconds since the epoch, moved by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def lay_out(
    cache: EnvironmentCache, requirements: list[str], *, last_used: float, endpoints: tuple[str, ...] = ()
) -> str:
    """A finished environment as the cache lays it out, without running the installer: its directory with an
    interpreter, and its record. Its key, as ``ensure`` computes it."""
    key = cache.key(requirements)
    path = cache.root / key
    python = env_python(path)
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    (path / "lib" / "site-packages").mkdir(parents=True)
    (path / "lib" / "site-packages" / "payload.bin").write_bytes(b"x" * 5000)
    record = EnvironmentRecord(
        key=key,
        requirements=tuple(requirements),
        python=cache.python.tag,
        host=cache.python.prefix,
        created=last_used,
        last_used=last_used,
        endpoints=endpoints,
        site_packages="lib/site-packages",
        inherited=("/host/site-packages",),
    )
    write_json(cache.root / f"{key}.json", record.to_json())
    return key


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> EnvironmentCache:
    root = tmp_path / "envs"
    root.mkdir()
    return EnvironmentCache(root, clock=clock, pip_config={})


@contextlib.contextmanager
def held_by_another_process(lock_file: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that takes the flock and says so, then waits to be killed (at the latest when the block ends)."""
    script = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(lock_file)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "held\n"
            yield proc
        finally:
            proc.kill()
            proc.wait()


# -- records


def test_records_round_trip(tmp_path: Path) -> None:
    record = EnvironmentRecord("k", ("six==1.16.0",), "cpython-3.11", "/venv", 1.0, 2.0, ("a",), "lib/sp", ("/h",))
    progress = BuildProgress("k", 42, 1.0, "a", ("six==1.16.0",), "Resolved 1 package", 3)
    failure = BuildFailure("k", ("nope==1",), "a", 5.0, "could not build", 1, ("error: no",))
    for value in (record, progress, failure):
        write_json(tmp_path / "r.json", value.to_json())
        assert type(value).from_json(read_json(tmp_path / "r.json") or {}) == value
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary file left behind
    assert progress.elapsed(now=11.0) == 10.0
    error = failure.error(recorded=True)
    assert error.recorded and error.output_tail == ("error: no",) and "error: no" in str(error)


def test_unreadable_records_read_as_absent(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{half")
    (tmp_path / "list.json").write_text("[1]")
    assert read_json(tmp_path / "bad.json") is None
    assert read_json(tmp_path / "list.json") is None
    assert read_json(tmp_path / "missing.json") is None


@pytest.mark.parametrize(
    ("lines", "kept"),
    [
        ([f"line {i}" for i in range(100)], [f"line {i}" for i in range(60, 100)]),  # the last 40
        (["a" * 5000, "b" * 5000], ["b" * 5000]),  # about 8 KB
        (["x" * 20000], ["x" * 8192]),  # one huge line keeps its end
        ([], []),
    ],
)
def test_bounded_tail(lines: list[str], kept: list[str]) -> None:
    assert list(bounded_tail(lines)) == kept


# -- the lock


def test_the_lock_excludes_another_process_and_dies_with_it(tmp_path: Path) -> None:
    lock_file = tmp_path / "k.lock"
    with held_by_another_process(lock_file) as holder:
        assert is_locked(lock_file)
        assert KeyLock(lock_file).acquire(blocking=False) is False
        holder.send_signal(signal.SIGKILL)  # a builder killed outright: the kernel drops its lock
        holder.wait()
        assert not is_locked(lock_file)
    lock = KeyLock(lock_file)
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_the_lock_excludes_another_thread_of_this_process(tmp_path: Path) -> None:
    lock_file = tmp_path / "k.lock"
    answers: list[bool] = []
    with KeyLock(lock_file):
        thread = threading.Thread(target=lambda: answers.append(KeyLock(lock_file).acquire(blocking=False)))
        thread.start()
        thread.join()
        assert is_locked(lock_file)
    assert answers == [False]
    assert not is_locked(lock_file)


def test_no_lock_file_means_not_locked(tmp_path: Path) -> None:
    assert not is_locked(tmp_path / "never.lock")


# -- ensure, without building


def test_a_finished_environment_is_a_hit(cache: EnvironmentCache, clock: Clock) -> None:
    # Given an environment laid out a day ago for endpoint "a"
    key = lay_out(cache, ["six==1.16.0"], last_used=clock.now - DAY, endpoints=("a",))
    # When endpoint "b" ensures the same set, spelled differently
    env = cache.ensure(["Six == 1.16.0"], endpoint="b")
    # Then nothing is built, and the record says who used it and when
    assert cache.builds == 0
    assert env == Environment(
        key=key,
        path=cache.root / key,
        python=cache.root / key / "bin" / "python",
        site_packages=cache.root / key / "lib" / "site-packages",
        requirements=("six==1.16.0",),
        inherited=("/host/site-packages",),
        built=False,
    )
    record = EnvironmentRecord.from_json(read_json(cache.root / f"{key}.json") or {})
    assert record.last_used == clock.now and record.endpoints == ("a", "b")
    cache.ensure(["six==1.16.0"], endpoint="a")
    assert EnvironmentRecord.from_json(read_json(cache.root / f"{key}.json") or {}).endpoints == ("a", "b")


def test_a_caller_that_must_wait_is_told_for_whom(cache: EnvironmentCache, clock: Clock) -> None:
    # Given a build of the key in progress (its lock held here, its progress record written)
    key = lay_out(cache, ["six==1.16.0"], last_used=clock.now)
    progress = BuildProgress(key, 4242, clock.now - 12, "a", ("six==1.16.0",), "Resolved 1 package", 1)
    write_json(cache.root / f"{key}.building", progress.to_json())
    told = threading.Event()
    lines: list[str] = []
    found: list[Environment] = []

    def on_line(line: str) -> None:
        lines.append(line)
        told.set()

    with KeyLock(cache.root / f"{key}.lock"):
        waiter = threading.Thread(
            target=lambda: found.append(cache.ensure(["six==1.16.0"], endpoint="b", on_line=on_line))
        )
        waiter.start()
        # When the caller finds the lock taken, it says whom it waits for before it blocks
        assert told.wait(timeout=30)
        assert found == []
    waiter.join()
    # Then, once the lock is let go, it gets the environment as a hit
    assert lines == [
        f"waiting for process 4242, which has been building environment {key} for 12 s (last line: Resolved 1 package)"
    ]
    assert len(found) == 1 and not found[0].built and cache.builds == 0


def test_a_recorded_failure_is_raised_without_building(cache: EnvironmentCache) -> None:
    key = cache.key(["nope==1.0"])
    failure = BuildFailure(key, ("nope==1.0",), "a", 1.0, "could not build nope", 1, ("error: nope not found",))
    write_json(cache.root / f"{key}.failed", failure.to_json())
    lines: list[str] = []
    with pytest.raises(EnvironmentBuildError, match="could not build nope") as info:
        cache.ensure(["nope==1.0"], endpoint="a", on_line=lines.append)
    assert info.value.recorded and info.value.key == key
    assert info.value.output_tail == ("error: nope not found",)
    assert cache.builds == 0 and lines == []
    assert cache.failure(key) == failure and cache.failures() == [failure]
    assert cache.forget_failures() == [key]
    assert cache.failure(key) is None


def test_a_bad_requirement_is_refused_before_the_cache_is_touched(tmp_path: Path) -> None:
    cache = EnvironmentCache(tmp_path / "never-made", pip_config={})
    with pytest.raises(Exception, match="installer option"):
        cache.ensure(["--index-url=https://evil.example/simple"], endpoint="a")
    assert not cache.root.exists()


def test_progress_is_reported_only_while_its_lock_is_held(cache: EnvironmentCache) -> None:
    key = "0123456789abcdef"
    progress = BuildProgress(key, os.getpid(), 5.0, "a", ("six",), "Resolved 1 package", 1)
    write_json(cache.root / f"{key}.building", progress.to_json())
    assert cache.building(key) is None  # left by a builder that died: nobody holds the lock
    with KeyLock(cache.root / f"{key}.lock"):
        assert cache.building(key) == progress
        assert cache.in_progress() == [progress]
    assert cache.building("fedcba9876543210") is None


def test_a_stale_progress_record_is_removed_by_the_next_lock_holder(cache: EnvironmentCache, clock: Clock) -> None:
    key = lay_out(cache, ["six==1.16.0"], last_used=clock.now)
    write_json(cache.root / f"{key}.building", BuildProgress(key, 1, 1.0, "a", ()).to_json())
    cache.ensure(["six==1.16.0"], endpoint="a")
    assert not (cache.root / f"{key}.building").exists()


def test_a_broken_environment_is_removed_and_not_returned(cache: EnvironmentCache, clock: Clock) -> None:
    # its interpreter is gone (the host Python was removed): ensure must not hand it out; here it then builds, which
    # the failing interpreter below turns into a quick, local failure instead of a real install
    key = lay_out(cache, ["six==1.16.0"], last_used=clock.now)
    env_python(cache.root / key).unlink()
    broken = EnvironmentCache(cache.root, clock=clock, pip_config={}, interpreter=str(cache.root / "no-python"))
    with pytest.raises(EnvironmentBuildError, match="virtual environment"):
        broken.ensure(["six==1.16.0"], endpoint="a")
    assert not (cache.root / key).exists() and broken.builds == 1
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]  # the temporary directory went too


def test_pythonpath_drops_the_inherited_directories(tmp_path: Path) -> None:
    env = Environment("k", tmp_path, tmp_path / "bin/python", tmp_path / "sp", (), inherited=(str(tmp_path / "host"),))
    entries = ["/app", str(tmp_path / "host"), "", str(tmp_path / "host") + "/", "/other"]
    assert env.pythonpath(entries) == ["/app", "/other"]


def test_default_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLASHPOINT_ENV_DIR", str(tmp_path / "mine"))  # the OS environment, mocked as the style allows
    assert default_root() == tmp_path / "mine"
    monkeypatch.delenv("FLASHPOINT_ENV_DIR")
    assert default_root() == Path.home() / ".flashpoint" / "envs"


# -- prune


def test_prune_by_days(cache: EnvironmentCache, clock: Clock) -> None:
    old = lay_out(cache, ["six==1.15.0"], last_used=clock.now - 10 * DAY)
    recent = lay_out(cache, ["six==1.16.0"], last_used=clock.now - 2 * DAY)
    report = cache.prune(unused_for_s=7 * DAY)
    assert report.removed == [old] and report.busy == []
    assert not (cache.root / old).exists() and not (cache.root / f"{old}.json").exists()
    assert (cache.root / f"{old}.lock").exists()  # lock files stay (lock.py says why)
    assert [e.key for e in cache.entries()] == [recent]


def test_prune_leaves_a_locked_environment_alone(cache: EnvironmentCache, clock: Clock) -> None:
    busy = lay_out(cache, ["six==1.15.0"], last_used=clock.now - 10 * DAY)
    idle = lay_out(cache, ["six==1.16.0"], last_used=clock.now - 10 * DAY)
    with held_by_another_process(cache.root / f"{busy}.lock"):
        report = cache.prune(everything=True)
    assert report.removed == [idle] and report.busy == [busy]
    assert (cache.root / busy).is_dir()


def test_prune_everything_takes_failures_orphans_and_leftovers(cache: EnvironmentCache, clock: Clock) -> None:
    kept = lay_out(cache, ["six==1.16.0"], last_used=clock.now)
    failed = cache.key(["nope==1"])
    write_json(cache.root / f"{failed}.failed", BuildFailure(failed, (), "a", 1.0, "x", 1, ()).to_json())
    orphan = "00000000000000aa"  # a record whose directory never arrived (a crash between the two)
    write_json(cache.root / f"{orphan}.json", {"key": orphan})
    leftover = cache.root / f".{kept}.tmp-123-abcd"  # a crashed build's temporary directory
    (leftover / "bin").mkdir(parents=True)
    crashed = "00000000000000bb"  # and the progress record it left
    write_json(cache.root / f"{crashed}.building", BuildProgress(crashed, 1, 1.0, "a", ()).to_json())
    # days first: the recent environment and the failure stay; the orphan record and the leftover go
    assert cache.prune(unused_for_s=DAY).removed == []
    assert (cache.root / kept).is_dir() and (cache.root / f"{failed}.failed").exists()
    assert not (cache.root / f"{orphan}.json").exists() and not leftover.exists()
    assert not (cache.root / f"{crashed}.building").exists()
    # then everything
    assert cache.prune(everything=True).removed == [kept]
    assert sorted(p.name for p in cache.root.iterdir() if not p.name.endswith(".lock")) == []


def test_prune_needs_to_be_told_what(cache: EnvironmentCache) -> None:
    with pytest.raises(ValueError, match="unused_for_s or everything"):
        cache.prune()


def test_entries_measure_size_and_sort_by_last_use(cache: EnvironmentCache, clock: Clock) -> None:
    first = lay_out(cache, ["six==1.15.0"], last_used=clock.now - DAY)
    second = lay_out(cache, ["six==1.16.0"], last_used=clock.now)
    os.link(cache.root / first / "lib/site-packages/payload.bin", cache.root / first / "lib/hardlink.bin")
    entries = cache.entries()
    assert [e.key for e in entries] == [second, first]
    assert all(5000 <= e.size < 6000 for e in entries)  # the hard link counts once; the symlinked python as a link


def test_importing_the_library_loads_no_edge() -> None:
    code = "import sys, flashpoint.environments; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert not loaded & {"typer", "rich", "fastapi", "starlette", "httpx", "uvicorn", "flashpoint.cli", "ray"}
    assert (
        "flashpoint.environments"
        not in subprocess.run(
            [sys.executable, "-c", "import sys, flashpoint; print(' '.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
