"""A class endpoint's instances on a real worker process: ``FLASHPOINT_MAX_INSTANCES`` (here in the endpoint's
``env``) bounds how many the worker keeps, and the least recently used is dropped (its state with it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flashpoint import Endpoint, GpuType
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


async def test_a_worker_keeps_at_most_its_limit_of_instances_dropping_the_least_recent(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="bounded-model", gpu=GpuType.NVIDIA_H200, env={"FLASHPOINT_MAX_INSTANCES": "2"})
    class Counter:
        def __init__(self, start: int) -> None:
            self.count = start

        def bump(self, by: int) -> int:
            self.count += by
            return self.count

    assert await Counter(10).bump(1) == 11
    assert await Counter(20).bump(1) == 21
    assert await Counter(10).bump(1) == 12  # kept: now the most recently used
    assert await Counter(30).bump(1) == 31  # a third: drops 20's instance, the least recent
    assert await Counter(10).bump(1) == 13  # still kept
    assert await Counter(20).bump(1) == 21  # built again: its count started over


def test_a_worker_with_an_unusable_limit_exits_saying_what_to_set() -> None:
    env = {**os.environ, "FLASHPOINT_MAX_INSTANCES": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "flashpoint.worker", "--import", "tests.apps.flash_app:Calculator"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "FLASHPOINT_MAX_INSTANCES is how many instances" in done.stderr and "got '0'" in done.stderr
