"""What a new user meets first, each fixed (issue 14 point 6): a waiting call that could never run fails at once
instead of hanging, and a script that ends with jobs still queued says how many it dropped."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuType, UnsatisfiableError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_a_call_the_fleet_can_never_run_fails_at_once_and_run_still_queues(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="b200-only", gpu=GpuType.NVIDIA_B200)
    async def b200(x: int) -> int:
        return x

    with pytest.raises(UnsatisfiableError, match="no node has NVIDIA B200") as info:
        await asyncio.wait_for(b200(1), 10)  # no hang: at once
    assert "add a fallback the fleet has" in str(info.value) and "Nothing was submitted" in str(info.value)
    job = await b200.run(1)  # the seed's rule still holds for a submitted job: it waits, explained
    assert await job.status() == "IN_QUEUE" and (await job.explain()).never


def test_the_readmes_first_example_does_not_hang_without_gpus(tmp_path: Path) -> None:
    script = tmp_path / "first.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio
            from flashpoint import Endpoint, GpuGroup

            @Endpoint(name="inference", gpu=GpuGroup.AMPERE_80)
            async def infer(data: dict) -> dict:
                return {"ok": True}

            asyncio.run(infer({"x": 1}))
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FLASHPOINT_SIMULATED_GPUS", "FLASHPOINT_URL")}
    env.update({"FLASHPOINT_SIMULATED_GPUS": "", "FLASHPOINT_STATE_DIR": str(tmp_path / "state")})
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 1
    assert "UnsatisfiableError" in done.stderr and "FLASHPOINT_SIMULATED_GPUS" in done.stderr


def test_a_script_ending_with_jobs_queued_says_how_many_it_dropped(tmp_path: Path) -> None:
    script = tmp_path / "leaves.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio
            from flashpoint import Endpoint

            @Endpoint(name="slow", gpu="NVIDIA H200", workers=(0, 1))
            async def slow(x: int) -> int:
                await asyncio.sleep(60)
                return x

            async def main():
                jobs = [await slow.run(i) for i in range(3)]
                while await jobs[0].status() != "IN_PROGRESS":
                    await asyncio.sleep(0.05)

            asyncio.run(main())
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "FLASHPOINT_URL"}
    env.update({"FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1", "FLASHPOINT_STATE_DIR": str(tmp_path / "state")})
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=90, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "2 job(s) still queued and 1 running: they are dropped" in done.stderr
