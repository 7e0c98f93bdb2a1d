"""Deploy benchmark: how long a deploy over HTTP takes to serve, and what a rollout does to the latency of the calls
it happens under, against a real ``flashpoint serve --data-dir`` on this machine, in one run.

Run it with ``python bench/bench_deploy.py`` (``--quick`` for a smoke run, ``--json`` for machine-readable output,
``--requirement REQ`` for the dependency). One server (an empty data dir, simulated GPUs, the environment cache and
uv's cache in a fresh temporary directory, so that "cold" is cold) takes every deploy, as ``flashpoint deploy`` sends
them (``POST /v1/apps/{app}/envs/{env}/versions`` with the packed project, then polling the version):

  (a) deploy to ready  from the upload's first byte to the version reported ``serving`` with its minimum of one worker
                       ready (polled every 20 ms); each split into accepted (the ``202``: stored, unpacked, loaded by
                       the isolated loader) and the rollout after it (the stages as the polls first saw them):
        no dependencies, first    a new app with one queue endpoint (``--reps``, median)
        no dependencies, next     its version 2: new workers warmed beside the old, then the switch (median)
        one dependency, cold      ``dependencies=[REQ]``: the environment built (uv venv, uv pip install from the index
                                  this machine's pip configuration names), then the worker started in it
        one dependency, cached    another app with the same requirements: the environment found in the cache
      and the isolated loader alone (``load_isolated`` of the no-dependency project, in this process; median)
  (b) latency under load  ``--callers`` concurrent callers, half on a queue endpoint (``/v2/{id}/runsync``), half on an
                       HTTP-route endpoint (``/{id}/v``) of one app (``workers=(2, 2)`` each, the fleet has room for a
                       second set beside the first): p50/p99 and errors for ``--seconds`` without a rollout (steady),
                       then the same load while ``--rollouts`` new versions are deployed one after another (measured
                       over the requests sent from each upload until its version serves), and p99(rollout)/p99(steady);
                       the anchor: the same load while as many other apps of the same shape are deployed beside it
                       (the same loader run and worker starts, nothing of the loaded app changing), so that what a
                       rollout costs can be told from what starting processes on a busy machine costs

Targets (issue 22; do not read them as guarantees, the load generator and the server share this machine's CPUs):
no-dependency deploy ready in under 3 s; zero errors during rollouts; p99 during a rollout within 2x steady p99. A
script, never a test; the server and its workers are stopped at the end, on failure and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from benchlib import percentiles, text_table

from flashpoint.hosting.artifacts import pack
from flashpoint.hosting.loader import load_isolated

BENCH = Path(__file__).resolve().parent
API_KEY = "bench-key"
HEADERS = {"Authorization": f"Bearer {API_KEY}"}
FLEET = "NVIDIA_A100_80GB_PCIe:16"
#: a small pure-Python package, pinned below what this machine's environment has, so the host never satisfies it
REQUIREMENT = "six==1.15.0"
ENV = "production"
POLL_S = 0.02
#: seconds a deploy may take before the bench gives up on it (a cold build included)
DEPLOY_TIMEOUT_S = 600.0
REQUEST_TIMEOUT_S = 60.0
TARGET_READY_S = 3.0
TARGET_ERRORS = 0
TARGET_P99_RATIO = 2.0

ECHO = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="echo", gpu=GpuGroup.ANY, workers=(1, 1))
async def echo(n: int) -> dict:
    return {{"version": {version}, "n": n}}
"""

WITH_DEPENDENCY = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="echo", gpu=GpuGroup.ANY, workers=(1, 1), dependencies=[{requirement!r}])
async def echo(n: int) -> dict:
    import six

    return {{"version": {version}, "six": six.__version__, "n": n}}
"""

LOADED = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="which", gpu=GpuGroup.ANY, workers=(2, 2))
async def which(n: int) -> dict:
    return {{"version": {version}, "n": n}}


web = Endpoint(name="web", gpu=GpuGroup.ANY, workers=(2, 2))


@web.get("/v")
async def v() -> dict:
    return {{"version": {version}}}
"""


# --------------------------------------------------------------------------------------------------------------------
# the server


@dataclass
class Server:
    proc: subprocess.Popen[str]
    log_path: Path
    url: str = ""

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (the server drains and stops its workers), then SIGKILL of its whole session."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session this script gave it: whatever outlived it
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start_server(tmp: Path) -> Server:
    """``flashpoint serve --data-dir`` in a session of its own, its environment cache and uv's cache in ``tmp``."""
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": FLEET,
        "FLASHPOINT_API_KEY": API_KEY,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "FLASHPOINT_ENV_DIR": str(tmp / "envs"),
        "UV_CACHE_DIR": str(tmp / "uv-cache"),
    }
    env.pop("FLASHPOINT_URL", None)
    command = [sys.executable, "-m", "flashpoint", "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    log_path = tmp / "server.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            command, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=log_file, text=True, start_new_session=True
        )
    server = Server(proc, log_path)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None and not server.url:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
                if "flashpoint serving" in line and " on http://" in line:
                    server.url = line.split(" on ", 1)[1].split()[0]
        if not server.url:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"the server did not start within 60 s (exit {proc.poll()}):\n{tail}")
    except BaseException:
        server.stop()
        raise
    return server


# --------------------------------------------------------------------------------------------------------------------
# (a) deploy to ready


def write_project(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(textwrap.dedent(source))
    return folder


@dataclass
class Deploy:
    """One deploy as the poller saw it: seconds from the upload to the ``202`` and to ``serving``; each stage first
    seen, in seconds from the upload."""

    accepted_s: float
    ready_s: float
    state: str
    detail: str
    stages: dict[str, float] = field(default_factory=dict)


async def deploy(session: aiohttp.ClientSession, url: str, app: str, folder: Path) -> Deploy:
    data = pack(folder).data  # packing is the CLI's work, before its upload
    started = time.perf_counter()
    async with session.post(
        f"{url}/v1/apps/{app}/envs/{ENV}/versions", data=data, headers={"Content-Type": "application/gzip"}
    ) as response:
        body = await response.json(content_type=None)
        if response.status != 202:
            raise RuntimeError(f"deploy of {app} refused: {response.status} {body}")
    accepted = time.perf_counter() - started
    number = body["version"]
    stages: dict[str, float] = {}
    deadline = time.monotonic() + DEPLOY_TIMEOUT_S
    while time.monotonic() < deadline:
        async with session.get(f"{url}/v1/apps/{app}/envs/{ENV}/versions/{number}") as response:
            rollout = await response.json(content_type=None)
        seen = time.perf_counter() - started
        stages.setdefault(rollout["stage"], seen)
        if rollout["state"] != "pending":
            return Deploy(accepted, seen, rollout["state"], rollout["detail"], stages)
        await asyncio.sleep(POLL_S)
    raise RuntimeError(f"version {number} of {app} not ready after {DEPLOY_TIMEOUT_S:g} s")


async def runsync(session: aiohttp.ClientSession, url: str, endpoint: str, n: int = 0) -> dict[str, Any]:
    async with session.post(f"{url}/v2/{endpoint}/runsync", json={"input": {"n": n}}) as response:
        body: dict[str, Any] = await response.json(content_type=None)
        if response.status != 200 or body.get("status") != "COMPLETED":
            raise RuntimeError(f"runsync {endpoint}: {response.status} {body}")
        return body


async def delete_app(session: aiohttp.ClientSession, url: str, app: str) -> None:
    async with session.delete(f"{url}/v1/apps/{app}") as response:
        await response.read()


async def measure_deploys(
    url: str, tmp: Path, reps: int, requirement: str, log: Callable[[str], None]
) -> dict[str, Any]:
    firsts: list[Deploy] = []
    nexts: list[Deploy] = []
    async with aiohttp.ClientSession(headers=HEADERS, timeout=aiohttp.ClientTimeout(total=DEPLOY_TIMEOUT_S)) as s:
        for i in range(reps):
            app = f"nodep{i}"
            first = await deploy(s, url, app, write_project(tmp / app / "v1", ECHO.format(version=1)))
            assert (await runsync(s, url, f"{app}.{ENV}.echo"))["output"]["version"] == 1
            second = await deploy(s, url, app, write_project(tmp / app / "v2", ECHO.format(version=2)))
            assert (await runsync(s, url, f"{app}.{ENV}.echo"))["output"]["version"] == 2
            firsts.append(first)
            nexts.append(second)
            log(f"  no dependencies #{i + 1}: first {first.ready_s:.2f} s, next {second.ready_s:.2f} s")
            await delete_app(s, url, app)
        dep = WITH_DEPENDENCY.format(version=1, requirement=requirement)
        cold = await deploy(s, url, "depcold", write_project(tmp / "depcold", dep))
        log(f"  one dependency, cold: {cold.ready_s:.2f} s ({cold.state} {cold.detail})")
        if cold.state == "serving":
            assert "six" not in requirement or (await runsync(s, url, f"depcold.{ENV}.echo"))["output"]["six"]
        cached = await deploy(s, url, "depcached", write_project(tmp / "depcached", dep))
        log(f"  one dependency, cached: {cached.ready_s:.2f} s ({cached.state} {cached.detail})")
        for app in ("depcold", "depcached"):
            await delete_app(s, url, app)
    loads = []
    for _ in range(reps):
        started = time.perf_counter()
        await asyncio.to_thread(load_isolated, tmp / "nodep0" / "v1")
        loads.append(time.perf_counter() - started)
    return {
        "no_dependency_first": summary(firsts),
        "no_dependency_next": summary(nexts),
        "dependency_cold": summary([cold]),
        "dependency_cached": summary([cached]),
        "loader_alone_s": statistics.median(loads),
    }


def summary(deploys: list[Deploy]) -> dict[str, Any]:
    """Medians over ``deploys`` (each stage over the deploys that reported it), and the states they ended in."""
    stages = {k: statistics.median(d.stages[k] for d in deploys if k in d.stages) for k in deploys[0].stages}
    return {
        "ready_s": statistics.median(d.ready_s for d in deploys),
        "accepted_s": statistics.median(d.accepted_s for d in deploys),
        "stages_s": stages,
        "n": len(deploys),
        "states": sorted({d.state for d in deploys}),
        "details": sorted({d.detail for d in deploys if d.detail}),
        "all_ready_s": [round(d.ready_s, 3) for d in deploys],
    }


# --------------------------------------------------------------------------------------------------------------------
# (b) latency under load, steady and during rollouts


@dataclass(frozen=True)
class Sample:
    kind: str
    started: float
    seconds: float
    error: str


async def call(session: aiohttp.ClientSession, url: str, kind: str, app: str, n: int) -> Sample:
    started = time.perf_counter()
    error = ""
    try:
        if kind == "queue":
            async with session.post(f"{url}/v2/{app}.{ENV}.which/runsync", json={"input": {"n": n}}) as response:
                body = await response.json(content_type=None)
                if response.status != 200 or body.get("status") != "COMPLETED":
                    error = f"{response.status} {str(body)[:200]}"
        else:
            async with session.get(f"{url}/{app}.{ENV}.web/v") as response:
                text = await response.text()
                if response.status != 200:
                    error = f"{response.status} {text[:200]}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return Sample(kind, started, time.perf_counter() - started, error)


async def drive(
    session: aiohttp.ClientSession, url: str, app: str, callers: int, stop: asyncio.Event, max_s: float
) -> list[Sample]:
    """``callers`` callers (half on each endpoint), one request after another, until ``stop`` or ``max_s``."""
    samples: list[Sample] = []
    deadline = time.monotonic() + max_s

    async def caller(kind: str) -> None:
        n = 0
        while not stop.is_set() and time.monotonic() < deadline:
            n += 1
            samples.append(await call(session, url, kind, app, n))

    await asyncio.gather(*(caller("queue" if i % 2 else "route") for i in range(callers)))
    return samples


def latency(samples: list[Sample]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for kind in ("queue", "route"):
        mine = [s for s in samples if s.kind == kind]
        errors = [s.error for s in mine if s.error]
        row: dict[str, Any] = dict(percentiles([s.seconds for s in mine if not s.error]))
        rows[kind] = {**row, "errors": len(errors), "first_error": errors[0] if errors else ""}
    return rows


async def under_deploys(
    s: aiohttp.ClientSession,
    url: str,
    app: str,
    callers: int,
    deploys: list[tuple[str, Path]],
    log: Callable[[str], None],
) -> tuple[list[Sample], list[Sample], list[Deploy]]:
    """The load on ``app`` while ``deploys`` (app, project) run one after another, a second apart: the samples sent
    from an upload until its version served, all the samples of the phase, and the deploys."""
    stop = asyncio.Event()
    load = asyncio.create_task(drive(s, url, app, callers, stop, len(deploys) * (DEPLOY_TIMEOUT_S + 1) + 1))
    windows: list[tuple[float, float]] = []
    done: list[Deploy] = []
    try:
        await asyncio.sleep(1.0)
        for target, folder in deploys:
            began = time.perf_counter()
            one = await deploy(s, url, target, folder)
            windows.append((began, time.perf_counter()))
            done.append(one)
            log(f"  {target} {folder.name}: {one.state} in {one.ready_s:.2f} s {one.detail}")
            if target != app:
                await delete_app(s, url, target)
            await asyncio.sleep(1.0)
    finally:
        stop.set()
        everything = await load
    during = [x for x in everything if any(a <= x.started <= b for a, b in windows)]
    return during, everything, done


async def measure_load(
    url: str, tmp: Path, callers: int, seconds: float, rollouts: int, log: Callable[[str], None]
) -> dict[str, Any]:
    app = "loaded"
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(headers=HEADERS, connector=connector, timeout=timeout) as s:
        first = await deploy(s, url, app, write_project(tmp / app / "v1", LOADED.format(version=1)))
        if first.state != "serving":
            raise RuntimeError(f"the loaded app did not deploy: {first}")
        await drive(s, url, app, callers, asyncio.Event(), 2.0)  # warm-up: every connection opened, every worker met

        # steady: no rollout
        steady = await drive(s, url, app, callers, asyncio.Event(), seconds)
        log(f"  steady: {len(steady)} requests in {seconds:g} s")

        # the same load while its app's versions are rolled out one after another
        versions = [(app, write_project(tmp / app / f"v{v}", LOADED.format(version=v))) for v in range(2, rollouts + 2)]
        during, whole, rolled = await under_deploys(s, url, app, callers, versions, log)

        # the anchor: the same load while as many other apps of the same shape are deployed (the same processes
        # start, the loader runs alike, but nothing of the loaded app changes)
        others = [(f"beside{i}", write_project(tmp / f"beside{i}", LOADED.format(version=1))) for i in range(rollouts)]
        beside, _, _ = await under_deploys(s, url, app, callers, others, log)
        await delete_app(s, url, app)
    result: dict[str, Any] = {
        "steady": latency(steady),
        "rollout": latency(during),
        "beside": latency(beside),
        "whole_rollout_phase": latency(whole),
        "rollouts": summary(rolled),
    }
    for name, phase in (("p99_ratio", "rollout"), ("p99_ratio_beside", "beside")):
        result[name] = {k: result[phase][k]["p99_ms"] / result["steady"][k]["p99_ms"] for k in ("queue", "route")}
    return result


# --------------------------------------------------------------------------------------------------------------------
# report


def deploy_table(report: dict[str, Any]) -> str:
    rows = []
    labels = {
        "no_dependency_first": "no dependencies, first",
        "no_dependency_next": "no dependencies, next",
        "dependency_cold": "one dependency, cold",
        "dependency_cached": "one dependency, cached",
    }
    for key, label in labels.items():
        row = report[key]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in row["stages_s"].items())
        rows.append(
            [
                label,
                str(row["n"]),
                f"{row['ready_s']:.2f} s",
                f"{row['accepted_s']:.2f} s",
                stages,
                "/".join(row["states"]),
            ]
        )
    rows.append(["isolated loader alone", "", "", f"{report['loader_alone_s']:.2f} s", "", ""])
    header = ["deploy", "n", "ready (median)", "accepted (202)", "stages first seen at (s)", "state"]
    return text_table(header, rows)


def load_table(report: dict[str, Any]) -> str:
    rows = []
    for phase in ("steady", "rollout", "beside"):
        for kind in ("queue", "route"):
            row = report[phase][kind]
            cells = [str(row["n"]), f"{row['p50_ms']:.1f}", f"{row['p99_ms']:.1f}", str(row["errors"])]
            rows.append([PHASES[phase], kind, *cells])
    for name, label in (("p99_ratio", "p99 rollout / steady"), ("p99_ratio_beside", "p99 beside / steady")):
        for kind in ("queue", "route"):
            rows.append([label, kind, "", "", f"{report[name][kind]:.2f}x", ""])
    return text_table(["load", "endpoint", "requests", "p50 ms", "p99 ms", "errors"], rows)


PHASES = {
    "steady": "steady (no deploy)",
    "rollout": "during rollouts",
    "beside": "another app deployed",
}


def targets(deploys: dict[str, Any], load: dict[str, Any]) -> str:
    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    ready = deploys["no_dependency_first"]["ready_s"]
    errors = sum(load["whole_rollout_phase"][k]["errors"] for k in ("queue", "route"))
    ratio = max(load["p99_ratio"].values())
    return "\n".join(
        [
            f"targets (issue 22), on {os.cpu_count()} CPUs shared by the load generator, the server and its workers:",
            f"  no-dependency deploy ready: {ready:.2f} s (< {TARGET_READY_S:g} s): {verdict(ready < TARGET_READY_S)}",
            f"  errors during rollouts: {errors} (= {TARGET_ERRORS}): {verdict(errors <= TARGET_ERRORS)}",
            f"  p99 rollout / steady: {ratio:.2f}x (<= {TARGET_P99_RATIO:g}x): {verdict(ratio <= TARGET_P99_RATIO)}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="deploys of the no-dependency app (median)")
    parser.add_argument("--requirement", default=REQUIREMENT, help="the dependency of the cold and cached rows")
    parser.add_argument("--callers", type=int, default=40, help="concurrent callers, half on each endpoint")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of steady load")
    parser.add_argument("--rollouts", type=int, default=3, help="rollouts under load")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 reps, 3 s, 1 rollout")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.seconds, args.rollouts = 2, 3.0, 1

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    server = None
    try:
        server = start_server(tmp)
        log(f"flashpoint serving at {server.url} (fleet {FLEET}, data and caches in {tmp})")
        log("(a) deploy to ready")
        deploys = asyncio.run(measure_deploys(server.url, tmp, args.reps, args.requirement, log))
        log(f"(b) {args.callers} callers, steady then during {args.rollouts} rollout(s)")
        load = asyncio.run(measure_load(server.url, tmp, args.callers, args.seconds, args.rollouts, log))
    except BaseException:
        if server is not None:
            log("\n".join(server.log_path.read_text(errors="replace").splitlines()[-20:]))
        raise
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"deploy": deploys, "load": load, "requirement": args.requirement, "callers": args.callers}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(deploy_table(deploys))
    print()
    print(load_table(load))
    print()
    print(targets(deploys, load))


if __name__ == "__main__":
    main()
