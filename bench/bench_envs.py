"""Environment benchmark: time to the first result of an endpoint with one small dependency, built cold and found
warm in flashpoint's environment cache, beside Ray's ``runtime_env={"pip": [...]}`` for the same requirement, in one
run.

Run it with ``python bench/bench_envs.py`` (``--rounds N``, ``--no-ray``, ``--json``, ``--requirement REQ``); Ray comes
with ``pip install -e '.[test]'`` or ``'.[bench]'``. Every measurement runs in a fresh process (nothing warm in the
interpreter, a new control plane or a new Ray), and times one call, from the call to its result, once the system it
calls is up (flashpoint's embedded server started; ``ray.init`` returned):

  flashpoint, no dependencies   the anchor: an endpoint without ``dependencies`` (a worker starts, runs one job)
  flashpoint, cold              ``dependencies=[REQ]`` with an empty environment cache and an empty uv cache: the
                                environment is built (uv venv, uv pip install), then the worker starts in it
  flashpoint, warm              the same, in a new process, with the environment the cold row built
  Ray, no runtime_env           the anchor: a fresh local Ray (``include_dashboard=False``, no usage reporting),
                                one task
  Ray, runtime_env pip          ``runtime_env={"pip": [REQ]}`` on a fresh local Ray (a new session: its
                                environment cache is empty) with pip's own cache off (``PIP_NO_CACHE_DIR``), as
                                flashpoint's cold row has uv's

Both installers read this machine's pip configuration (index, find-links): pip directly, uv through flashpoint's
translation. Targets (issue 13): flashpoint cold at most 0.5x Ray's runtime_env row; warm adding under 0.2 s over
flashpoint without dependencies. Rows take turns within each round (``--rounds``, default 3), so the machine's other
load falls on all alike; medians are reported. A script, never a test; every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from benchlib import text_table

BENCH = Path(__file__).resolve().parent
#: a small pure-Python package, pinned below the version this machine's environment has, so the host never satisfies it
REQUIREMENT = "six==1.15.0"
GPU = "NVIDIA_A100_80GB_PCIe"
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
TARGET_COLD = 0.5
TARGET_WARM_S = 0.2
#: seconds one measurement may take before the bench gives up on it
CHILD_TIMEOUT_S = 600

FLASHPOINT_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from flashpoint import Endpoint
    from flashpoint.sdk import default_connection

    requirement = sys.argv[1]

    async def main() -> None:
        default_connection.connect()  # the embedded server is up before the clock starts
        if requirement:
            @Endpoint(name="bench-env", gpu="NVIDIA A100 80GB PCIe", dependencies=[requirement])
            async def probe() -> str:
                import six
                return six.__version__
        else:
            @Endpoint(name="bench-env", gpu="NVIDIA A100 80GB PCIe")
            async def probe() -> str:
                return "none"
        started = time.perf_counter()
        result = await probe()
        print(json.dumps({"seconds": time.perf_counter() - started, "result": result}), flush=True)

    asyncio.run(main())
    """
)

RAY_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import ray

    requirement = sys.argv[1]
    ray.init(address="local", include_dashboard=False, num_cpus=2, log_to_driver=False, _temp_dir=sys.argv[2])

    def probe() -> str:
        if requirement:
            import six
            return six.__version__
        return "none"

    options = {"runtime_env": {"pip": [requirement]}} if requirement else {}
    task = ray.remote(probe).options(**options)
    started = time.perf_counter()
    result = ray.get(task.remote(), timeout=float(sys.argv[3]))
    print(json.dumps({"seconds": time.perf_counter() - started, "result": result}), flush=True)
    ray.shutdown()
    """
)


def run_child(code: str, args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (its own process group, stopped whatever happens); its JSON line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise SystemExit(f"a measurement took over {CHILD_TIMEOUT_S}s: {args}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"a measurement failed (exit {proc.returncode}) {args}:\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def flashpoint_env(tmp: Path, envs: Path, uv_cache: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": f"{GPU}:1",
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "FLASHPOINT_ENV_DIR": str(envs),
        "UV_CACHE_DIR": str(uv_cache),
        "FLASHPOINT_LOG_LEVEL": "WARNING",
    }
    env.pop("FLASHPOINT_URL", None)
    return env


def one_round(tmp: Path, requirement: str, ray: bool) -> dict[str, float]:
    """Each row once, in a fresh process each; seconds to the first result."""
    found: dict[str, float] = {}
    envs, uv_cache = tmp / "envs", tmp / "uv-cache"
    for path in (envs, uv_cache):
        shutil.rmtree(path, ignore_errors=True)
    fp = flashpoint_env(tmp, envs, uv_cache)
    found["flashpoint, no dependencies"] = run_child(FLASHPOINT_CHILD, [""], fp, tmp)["seconds"]
    cold = run_child(FLASHPOINT_CHILD, [requirement], fp, tmp)
    assert cold["result"] == requirement.partition("==")[2], cold
    found["flashpoint, cold"] = cold["seconds"]
    found["flashpoint, warm"] = run_child(FLASHPOINT_CHILD, [requirement], fp, tmp)["seconds"]
    if ray:
        ray_env = {**os.environ, **RAY_ENV, "PIP_NO_CACHE_DIR": "1"}
        ray_env.pop("RAY_ADDRESS", None)
        for row, req in (("Ray, no runtime_env", ""), ("Ray, runtime_env pip", requirement)):
            session = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # Ray's socket paths must stay short
            try:
                answer = run_child(RAY_CHILD, [req, str(session), str(CHILD_TIMEOUT_S)], ray_env, tmp)
            finally:
                shutil.rmtree(session, ignore_errors=True)
            if req:
                assert answer["result"] == requirement.partition("==")[2], answer
            found[row] = answer["seconds"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="turns each row takes (default 3); medians reported")
    parser.add_argument("--requirement", default=REQUIREMENT, help=f"the one dependency (default {REQUIREMENT})")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray's rows")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if "==" not in args.requirement:
        parser.error("--requirement must pin one version (name==version): the bench checks the worker imports it")
    ray = not args.no_ray
    if ray:
        try:
            import ray as _  # noqa: F401
        except ImportError:
            parser.error("Ray is not installed: pip install -e '.[bench]', or run with --no-ray")
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as name:
        tmp = Path(name)
        for turn in range(args.rounds):
            began = time.perf_counter()
            for row, seconds in one_round(tmp, args.requirement, ray).items():
                samples.setdefault(row, []).append(seconds)
            print(f"round {turn + 1}/{args.rounds} done in {time.perf_counter() - began:.0f}s", file=sys.stderr)
    medians = {row: statistics.median(values) for row, values in samples.items()}
    report: dict[str, Any] = {
        "requirement": args.requirement,
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "seconds": samples,
        "median_s": medians,
        "warm_added_s": medians["flashpoint, warm"] - medians["flashpoint, no dependencies"],
    }
    if ray:
        report["cold_vs_ray"] = medians["flashpoint, cold"] / medians["Ray, runtime_env pip"]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"bench-envs: {args.requirement}, {args.rounds} round(s); load average {os.getloadavg()}")
    rows = [[row, f"{medians[row]:.2f}", " / ".join(f"{s:.2f}" for s in samples[row])] for row in samples]
    print(text_table(["row", "median s", "each round s"], rows))
    print()
    added = report["warm_added_s"]
    verdict = "ok" if added < TARGET_WARM_S else "MISSED"
    print(f"warm - no dependencies   {added:+.3f} s   target < {TARGET_WARM_S} s   {verdict}")
    if ray:
        ratio = report["cold_vs_ray"]
        verdict = "ok" if ratio <= TARGET_COLD else "MISSED"
        print(f"cold / Ray runtime_env   {ratio:.2f}x    target <= {TARGET_COLD}x   {verdict}")


if __name__ == "__main__":
    main()
