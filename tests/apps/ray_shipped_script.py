"""A script for the Ray backend's code-shipping test (``tests/ray/test_shipping.py``), run as ``__main__``.

Its functions are cloudpickled by value (they live in ``__main__``) and use a module of their own folder
(``ray_shipped_helper``) by reference; the app module is imported by path. The test runs it from a folder the Ray
nodes cannot see, so all of them must reach the worker through Ray. Arguments: the
app module's folder and the hidden folder. Prints one JSON line: each job's status, output and error.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from flashpoint import Endpoint, GpuType

APP_DIR, HIDDEN = sys.argv[1], sys.argv[2]
sys.path.insert(0, APP_DIR)

import ray_shipped_app  # noqa: E402  (from the folder above, as an app's own module)
import ray_shipped_helper  # noqa: E402  (beside this script)


def report(hidden: str) -> dict[str, Any]:
    """Where this worker runs and what it sees (pickled by value with the functions below)."""
    import os
    import sys

    return {
        "cwd": os.getcwd(),
        "argv": sys.argv,
        "executable": sys.executable,
        "hidden_visible": os.path.exists(os.path.join(hidden, "app")),
        "node": os.environ.get("FLASHPOINT_RAY_NODE_ID"),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }


@Endpoint(name="ray-script", gpu=GpuType.NVIDIA_H200)
async def from_script(hidden: str) -> dict[str, Any]:
    return {**report(hidden), "helper_file": ray_shipped_helper.where()}


@Endpoint(name="ray-six", gpu=GpuType.NVIDIA_H200, dependencies=["six==1.15.0"])
async def with_six(hidden: str) -> dict[str, Any]:
    import six

    return {**report(hidden), "six": six.__version__, "six_file": six.__file__}


@Endpoint(name="ray-missing", gpu=GpuType.NVIDIA_H200, dependencies=["flashpoint-no-such-package==0.0.1"])
async def with_missing() -> dict[str, Any]:
    return {}


async def main() -> None:
    jobs = {
        "script": await from_script.run(HIDDEN),
        "app": await ray_shipped_app.from_app.run(HIDDEN),
        "six": await with_six.run(HIDDEN),
        "missing": await with_missing.run(),
    }
    results = {}
    for name, job in jobs.items():
        try:
            status = await job.wait(timeout=float(os.environ.get("SHIPPING_JOB_TIMEOUT_S", "240")))
        except TimeoutError:
            status = f"still {await job.status()}"
        error = job.view.error
        results[name] = {
            "status": status,
            "output": job.output,
            "error": error.to_json() if error is not None else None,
            "reason": job.view.reason.value if job.view.reason is not None else None,
        }
    print(json.dumps({"jobs": results, "code_dir": os.environ.get("TMPDIR", "")}), flush=True)


asyncio.run(main())
