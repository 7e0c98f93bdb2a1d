"""The in-use hold: an environment a plane holds (``ensure(hold=True)``: its workers run there) is never pruned.

The environments are built for real with no requirements (uv makes the virtual environment and the runtime checks run;
nothing is downloaded), and the holds are real flocks, in this process and in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashpoint.environments import EnvironmentCache
from tests.environments.test_cache import DAY, Clock

pytestmark = pytest.mark.timeout(120)

#: a child that takes a hold on the environment (building it when needed), says its key, and holds it until stdin ends
HOLDER = """
import sys
from flashpoint.environments import EnvironmentCache
env = EnvironmentCache(sys.argv[1], pip_config={}).ensure([], endpoint="child", hold=True)
print(env.key, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> EnvironmentCache:
    return EnvironmentCache(tmp_path / "envs", clock=clock, pip_config={})


def test_prune_leaves_a_held_environment_alone_until_it_is_released(cache: EnvironmentCache, clock: Clock) -> None:
    # Given a real environment, held as a plane holds one, and a month of disuse
    env = cache.ensure([], endpoint="a", hold=True)
    assert env.built and env.hold is not None and env.hold.held
    assert [(e.key, e.in_use) for e in cache.entries()] == [(env.key, True)]
    clock.now += 30 * DAY
    # When it is pruned, by age or all of it
    for report in (cache.prune(everything=True), cache.prune(unused_for_s=0)):
        # Then it stays, reported in use
        assert report.removed == [] and report.busy == [] and report.in_use == [env.key]
    assert env.python.exists() and (cache.root / f"{env.key}.json").exists()
    # and once released (twice does no harm), it goes
    env.release()
    env.release()
    assert [e.in_use for e in cache.entries()] == [False]
    report = cache.prune(unused_for_s=0)
    assert report.removed == [env.key] and report.in_use == []
    assert not env.path.exists()


def test_every_holder_counts_and_a_plain_ensure_holds_nothing(cache: EnvironmentCache) -> None:
    first = cache.ensure([], endpoint="a", hold=True)
    second = cache.ensure([], endpoint="b", hold=True)  # a hit takes a hold too
    plain = cache.ensure([], endpoint="c")
    assert not second.built and plain.hold is None and cache.builds == 1
    first.release()
    assert cache.prune(everything=True).in_use == [first.key]  # the second hold still counts
    second.release()
    assert cache.prune(everything=True).removed == [first.key]


def test_a_hold_in_another_process_keeps_the_environment_until_that_process_ends(cache: EnvironmentCache) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cache.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            key = child.stdout.readline().strip()  # the child built the environment and holds it
            assert key == cache.key([])
            report = cache.prune(everything=True)
            assert report.removed == [] and report.in_use == [key]
            assert (cache.root / key).is_dir()
        finally:
            assert child.stdin is not None
            child.stdin.close()  # the child's stdin ends: it exits, and its hold with it
            child.wait(30)
    assert child.returncode == 0
    report = cache.prune(everything=True)
    assert report.removed == [key] and report.in_use == []


#: a worker process as the plane starts one (``FLASHPOINT_ENV_INUSE`` set): it sets itself up, says so, and runs until
#: stdin ends
WORKER = "from flashpoint.worker import isolation; print(isolation.apply(), flush=True); import sys; sys.stdin.read()"
#: a user's own command, which ``flashpoint.worker.launch`` execs after setting up: it knows nothing of flashpoint
COMMAND = "print({'environment': 'inherited'}, flush=True); import sys; sys.stdin.read()"


@pytest.mark.parametrize("launch", [False, True], ids=["runtime", "exec of a user's command"])
def test_a_worker_holds_its_environment_while_it_runs_after_the_plane_lets_go(
    cache: EnvironmentCache, clock: Clock, launch: bool
) -> None:
    # Given a real environment, held by the plane, and a worker started in it (told of it by FLASHPOINT_ENV_INUSE)
    env = cache.ensure([], endpoint="a", hold=True)
    command = [sys.executable, "-c", WORKER]
    if launch:  # the hold taken by the launcher must survive its exec of the command
        command = [sys.executable, "-m", "flashpoint.worker.launch", "--", sys.executable, "-c", COMMAND]
    worker = subprocess.Popen(
        command,
        env={**os.environ, "FLASHPOINT_ENV_INUSE": str(env.in_use_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        assert "'environment':" in worker.stdout.readline()
        # When the plane lets go (its endpoint redeclared with other dependencies) and the cache is pruned
        env.release()
        clock.now += 30 * DAY
        # Then the environment stays while the worker runs
        assert cache.prune(everything=True).in_use == [env.key] and env.python.exists()
    finally:
        worker.stdin.close()
        worker.wait(30)
        worker.stdout.close()
    # and goes once it has exited
    assert cache.prune(everything=True).removed == [env.key]


def test_a_worker_told_of_an_environment_that_is_gone_runs_on(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from flashpoint.worker import isolation; print(isolation.apply())"],
        env={**os.environ, "FLASHPOINT_ENV_INUSE": str(tmp_path / "gone.inuse")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "{}" and "cannot hold environment" in done.stderr
