"""Route benchmark: a no-op HTTP route through `flashpoint serve`'s proxy, beside the same app reached directly and
beside Ray Serve with the same number of replicas, in one run.

Run it with ``python bench/bench_routes.py`` (``--quick`` for a smoke run, ``--no-ray`` without Ray Serve, ``--json``
for machine-readable output); Ray Serve comes with ``pip install -e '.[bench]'``. The endpoint is
``bench/routes_app.py`` (``GET /noop`` answers ``{"ok":true}``; ``GET /stream`` yields a first JSON line at once and
two more 20 ms apart). Three targets serve it on loopback, each in its own process tree:

  (a) direct:    the route workers of (b) themselves (``python -m flashpoint.worker --routes --import
                 routes_app:api``, uvicorn + the route worker's FastAPI app), with the route secret the proxy sends
                 them (read from their environment), at the addresses ``/v1/endpoints``
                 gives; the clients are spread evenly over the N workers
  (b) proxy:     a real ``flashpoint serve bench/routes_app.py`` on simulated GPUs with ``workers=(N, N)`` (every
                 worker ready before anything is measured), ``GET /bench-routes/noop`` with the API key
  (c) Ray Serve: a fresh local Ray (``address="local"``, ``include_dashboard=False``, no usage reporting), Serve's
                 HTTP proxy on 127.0.0.1, one FastAPI-ingress deployment of N replicas (a simulated GPU each) whose
                 app is the route worker's own (``routes_app.build_app``, built on each replica), at the same path
                 ``/bench-routes/noop``; max_ongoing_requests raised so that no client waits for a replica slot and
                 the access log off, as flashpoint keeps none (``--ray-defaults``: Serve as it comes)

One load generator in this process (aiohttp on uvloop, keep-alive connections, the same for every target) measures
each target, after an untimed warm-up; (a) and (b) take turns within each row (``--rounds``, default 3), so that the
machine's other load falls on both alike, and (c) runs once flashpoint's processes are gone:
  throughput   ``--concurrency`` clients (default 50) for ``--seconds`` (default 10): requests/s, p50/p99, and the
               CPU each process tree, the load generator and the rest of the machine used
  latency      one client, one request at a time (half as long): p50/p99, and the proxy's added p50 (proxy - direct)
  first chunk  one client, one stream at a time (half as long): time to the stream's first chunk, p50/p99

Targets (issue 12; DESIGN.md section 7): proxy >= 0.6x direct requests/s; added p50 latency < 0.5 ms; proxy >= 3x
Ray Serve's requests/s. The load generator and every server share this machine's CPUs: compare ratios from one run,
not absolute figures across runs. A script, never a test. Every process it starts (the server and its workers, Ray
and its actors) is stopped at the end, on failure and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import percentiles, text_table

from flashpoint.wire.protocol import ROUTE_SECRET_ENV, ROUTE_SECRET_HEADER

BENCH = Path(__file__).resolve().parent
APP = BENCH / "routes_app.py"
ENDPOINT = "bench-routes"
FLEET_GPU = "NVIDIA_A100_80GB_PCIe"
API_KEY = "bench-key"
HEADERS = {"Authorization": f"Bearer {API_KEY}"}
NOOP_BODY = b'{"ok":true}'
#: a route worker's address -> the route secret its server's proxy sends it (the direct rows send it too)
ROUTE_SECRETS: dict[str, str] = {}
STREAM_BODY = b'{"chunk":0}\n{"chunk":1}\n{"chunk":2}\n'
REQUEST_TIMEOUT_S = 30.0
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
#: proxy requests/s over direct; added p50 latency (ms); proxy requests/s over Ray Serve's
TARGET_DIRECT = 0.6
TARGET_ADDED_MS = 0.5
TARGET_RAY = 3.0

# Ray Serve, in a process of its own (so Ray's driver threads do not share the load generator's interpreter): a
# fresh local Ray, Serve's HTTP proxy on loopback, one ingress deployment of N replicas, each holding a simulated GPU
# as flashpoint's workers do. max_ongoing_requests is raised from Serve's default (5) so that no client waits for a
# replica slot (flashpoint's workers take every request sent to them), and the access log is off (as flashpoint's
# server and workers keep none); ``--ray-defaults`` keeps Serve's defaults for both.
RAY_SERVE = textwrap.dedent(
    """
    import os, signal, sys, threading

    import ray
    from ray import serve

    from routes_app import build_app

    replicas, port, max_ongoing, access_log = (int(a) for a in sys.argv[1:5])
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=replicas, include_dashboard=False,
             log_to_driver=False)
    try:
        serve.start(
            http_options={"host": "127.0.0.1", "port": port}, logging_config={"enable_access_log": bool(access_log)}
        )
        options = {"max_ongoing_requests": max_ongoing} if max_ongoing else {}
        deployment = serve.deployment(
            serve.ingress(build_app)(),
            name="bench-routes",
            num_replicas=replicas,
            ray_actor_options={"num_cpus": 0, "num_gpus": 1},
            **options,
        )
        serve.run(deployment.bind(), name="bench", route_prefix="/bench-routes")
        print(f"ray serve serving {replicas} replica(s) on http://127.0.0.1:{port} (ray {ray.__version__})",
              flush=True)
        stop.wait()
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
    """
)


# --------------------------------------------------------------------------------------------------------------------
# processes: each target is a process tree this script started, stopped whole at the end


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0], ppid [1], utime [11], stime [12], start [19])."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def descendants(root: int) -> dict[int, str]:
    """The processes below ``root`` (children, theirs, ...) as ``{pid: start time}`` (empty where there is no /proc)."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                parents[int(entry.name)] = (int(fields[1]), fields[19])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, started) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = started
                frontier.append(pid)
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (those gone count nothing)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """CPU seconds this machine spent busy, and stolen by its hypervisor, so far (all CPUs; zeros without /proc)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


@dataclass
class Target:
    """A server process this script started, the base URL it printed, and what it has started since."""

    name: str
    proc: subprocess.Popen[str]
    log_path: Path
    url: str = ""
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    #: every process seen below ``proc`` (pid: start time), so none outlives the bench
    seen: dict[int, str] = field(default_factory=dict)

    def watch(self) -> None:
        """Remember the processes below this one now (the stop kills any that outlive their parent)."""
        self.seen.update(descendants(self.proc.pid))

    def stop(self, timeout: float = 30) -> None:
        self.watch()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # what the server did not stop itself (a worker, a Ray daemon): a grace period, then SIGKILL; the start time
        # guards against a pid reused since
        deadline = time.monotonic() + 5
        alive = dict(self.seen)
        while alive and time.monotonic() < deadline:
            alive = {p: s for p, s in alive.items() if (f := _stat(p)) is not None and f[19] == s and f[0] != "Z"}
            if alive:
                time.sleep(0.1)
        names = []
        for pid in alive:
            try:
                names.append(Path(f"/proc/{pid}/comm").read_text().strip())
                os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        if alive:
            print(f"  {self.name}: killed what outlived it by 5 s: {', '.join(names)}", file=sys.stderr)

    def tail(self) -> str:
        log = self.log_path.read_text(errors="replace").splitlines()[-20:] if self.log_path.exists() else []
        return "\n".join([*self.lines, *log])


def start_target(name: str, command: list[str], env: dict[str, str], marker: str, tmp: Path, timeout: float) -> Target:
    """Start ``command`` in a session of its own (a Ctrl-C here reaches this script only, which stops it in order)
    and wait, bounded, for its stdout line with ``marker`` and ``on http://...``; stderr goes to a file."""
    log_path = tmp / f"{name}.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            command, env=env, cwd=BENCH, stdout=subprocess.PIPE, stderr=log_file, text=True, start_new_session=True
        )
    target = Target(name, proc, log_path)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
                target.lines.append(line.rstrip())
                if marker in line and " on http://" in line:
                    target.url = line.split(" on ", 1)[1].split()[0]
                    break
        if not target.url:
            raise RuntimeError(f"{name} did not start within {timeout:g}s (exit {proc.poll()}):\n{target.tail()}")
    except BaseException:
        target.stop()
        raise
    # keep reading its stdout (a full pipe would block it), remembering the last lines for errors
    rest = (line.rstrip() for line in proc.stdout)
    threading.Thread(target=target.lines.extend, args=(rest,), daemon=True).start()
    return target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_flashpoint(tmp: Path, replicas: int) -> Target:
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": f"{FLEET_GPU}:{replicas}",
        "FLASHPOINT_API_KEY": API_KEY,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "BENCH_ROUTES_REPLICAS": str(replicas),
    }
    env.pop("FLASHPOINT_URL", None)
    command = [sys.executable, "-m", "flashpoint", "serve", str(APP), "--port", "0", "--db", str(tmp / "jobs.db")]
    return start_target("flashpoint", command, env, "flashpoint serving", tmp, timeout=60)


def start_ray_serve(tmp: Path, replicas: int, max_ongoing: int, access_log: bool) -> Target:
    env = {**os.environ, **RAY_ENV, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-c", RAY_SERVE, str(replicas), str(free_port()), str(max_ongoing), str(int(access_log))]
    return start_target("ray-serve", command, env, "ray serve serving", tmp, timeout=180)


# --------------------------------------------------------------------------------------------------------------------
# load generator


class BadAnswer(Exception):
    pass


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""


def secret_header(url: str) -> dict[str, str]:
    """The route secret header for a request straight to a route worker; none for the proxy or Ray Serve."""
    secret = ROUTE_SECRETS.get(url.split("/")[2])
    return {ROUTE_SECRET_HEADER: secret} if secret else {}


def find_route_secrets(addresses: list[str]) -> dict[str, str]:
    """Each route worker's route secret, read from its process's environment (``/proc/PID/environ``: this user's
    processes only), matched to its address by the ``PORT`` it listens on. A flashpoint route worker answers nothing
    without it, as the server's proxy is the only caller it serves."""
    ports = {address.rpartition(":")[2]: address for address in addresses}
    found: dict[str, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            raw = (proc / "environ").read_bytes()
        except OSError:
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if ROUTE_SECRET_ENV in env and env.get("PORT") in ports:
            found[ports[env["PORT"]]] = env[ROUTE_SECRET_ENV]
    missing = sorted(set(addresses) - set(found))
    if missing:
        raise RuntimeError(f"no route secret found for the route worker(s) at {', '.join(missing)}")
    return found


async def get_noop(session: Any, url: str, tally: Tally) -> None:
    async with session.get(url, headers=secret_header(url)) as response:
        body = await response.read()
    if response.status != 200 or body != NOOP_BODY:
        raise BadAnswer(f"GET {url}: {response.status} {body[:200]!r}")


async def get_stream(session: Any, url: str, tally: Tally) -> None:
    began = time.perf_counter()
    async with session.get(url, headers=secret_header(url)) as response:
        first = await response.content.readany()
        tally.firsts.append(time.perf_counter() - began)
        body = first + await response.read()
    if response.status != 200 or not first.startswith(b'{"chunk":0}') or body != STREAM_BODY:
        raise BadAnswer(f"GET {url}: {response.status} {body[:200]!r}")


Op = Callable[[Any, str, Tally], Awaitable[None]]


async def drive(session: Any, op: Op, urls: list[str], clients: int, seconds: float, tally: Tally) -> float:
    """``clients`` coroutines (client i on ``urls[i % len(urls)]``) repeat ``op`` for ``seconds``, counted in
    ``tally``; the seconds it took."""
    end = time.perf_counter() + seconds

    async def client(url: str) -> None:
        while time.perf_counter() < end and tally.errors <= 100:
            began = time.perf_counter()
            try:
                await op(session, url, tally)
            except Exception as exc:  # counted; the row goes on (a row with errors is reported as such)
                tally.errors += 1
                tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"
                continue
            tally.latencies.append(time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client(urls[i % len(urls)]) for i in range(clients))), seconds + 60)
    return time.perf_counter() - started


@dataclass
class Row:
    """One measurement of one target, summed over its rounds: requests, latencies and the CPU seconds spent."""

    tally: Tally = field(default_factory=Tally)
    seconds: float = 0.0
    serving_cpu_s: float = 0.0
    server_cpu_s: float | None = 0.0
    client_cpu_s: float = 0.0
    machine_busy_s: float = 0.0
    machine_steal_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        done = len(self.tally.latencies)
        if self.tally.errors:
            print(f"  {self.tally.errors} error(s); first: {self.tally.first_error}", file=sys.stderr)
        return {
            "requests": done,
            "errors": self.tally.errors,
            "seconds": self.seconds,
            "per_s": done / self.seconds,
            "latency": percentiles(self.tally.latencies),
            "first_chunk": percentiles(self.tally.firsts),
            "serving_cpu_s": self.serving_cpu_s,
            "server_cpu_s": self.server_cpu_s,
            "client_cpu_s": self.client_cpu_s,
            "machine_busy_s": self.machine_busy_s,
            "machine_steal_s": self.machine_steal_s,
        }


#: one target to measure: its name, its process tree and its URLs ("noop": [...], "stream": [...])
Side = tuple[str, Target, dict[str, list[str]]]


async def measure(args: argparse.Namespace, session: Any, sides: list[Side], log: Any) -> dict[str, Any]:
    """Three rows for each target (throughput, latency, first chunk), each after an untimed warm-up. The targets
    take turns, ``--rounds`` times per row, so that a change in the machine's other load falls on all of them."""
    plan = [
        ("throughput", get_noop, "noop", args.concurrency, args.seconds),
        ("latency", get_noop, "noop", 1, args.latency_seconds),
        ("first_chunk", get_stream, "stream", 1, args.stream_seconds),
    ]
    results: dict[str, Any] = {name: {} for name, _, _ in sides}
    for row, op, path, clients, seconds in plan:
        names = " and ".join(name for name, _, _ in sides)
        print(f"{row}: {names}, {clients} client(s), {seconds:g} s each, in {args.rounds} turn(s)", file=log)
        rows = {name: Row() for name, _, _ in sides}
        for _, _, urls in sides:
            await drive(session, op, urls[path], clients, args.warmup, Tally())
        for turn in range(args.rounds):
            for name, target, urls in sides:
                acc = rows[name]
                target.watch()
                pids = [target.proc.pid, *target.seen]
                profile = row == "throughput" and name == "proxy" and turn == 0
                profiler = start_py_spy(target, args, row, seconds / args.rounds) if profile else None
                cpu0, root0, client0 = cpu_seconds(pids), cpu_seconds(pids[:1]), time.process_time()
                busy0, steal0 = machine_cpu()
                acc.seconds += await drive(session, op, urls[path], clients, seconds / args.rounds, acc.tally)
                busy1, steal1 = machine_cpu()
                acc.machine_busy_s += busy1 - busy0
                acc.machine_steal_s += steal1 - steal0
                acc.serving_cpu_s += cpu_seconds(pids) - cpu0
                acc.client_cpu_s += time.process_time() - client0
                # the server's own process: flashpoint's proxy (idle in the direct rows); Ray's is an idle driver
                if name == "ray":
                    acc.server_cpu_s = None
                elif acc.server_cpu_s is not None:
                    acc.server_cpu_s += cpu_seconds(pids[:1]) - root0
                if profiler is not None:
                    finish_py_spy(profiler)
        for name, acc in rows.items():
            results[name][row] = acc.summary()
    return results


def start_py_spy(target: Target, args: argparse.Namespace, row: str, seconds: float) -> subprocess.Popen[bytes] | None:
    """py-spy on the server process alone (not its workers), for the proxy's throughput row (``--profile DIR``)."""
    if args.profile is None:
        return None
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        print("  --profile: py-spy not found, skipped", file=sys.stderr)
        return None
    args.profile.mkdir(parents=True, exist_ok=True)
    out = args.profile / f"proxy-{row}.txt"
    command = [py_spy, "record", "-p", str(target.proc.pid), "-f", "raw", "-o", str(out), "-r", "200",
               "-d", str(max(1, int(seconds))), "--nonblocking"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finish_py_spy(profiler: subprocess.Popen[bytes]) -> None:
    try:
        profiler.wait(30)
    except subprocess.TimeoutExpired:
        profiler.kill()
        profiler.wait(10)


async def wait_for_flashpoint(session: Any, url: str, replicas: int, timeout: float) -> list[str]:
    """Poll ``/v1/endpoints/bench-routes`` until its N workers are ready, then the route through the proxy; the
    workers' addresses (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    workers: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        async with session.get(f"{url}/v1/endpoints/{ENDPOINT}") as response:
            if response.status == 200:
                workers = (await response.json())["workers"]
                ready = [w["address"] for w in workers if w["state"] in ("IDLE", "RUNNING") and w.get("address")]
                if len(ready) >= replicas:
                    await get_noop(session, f"{url}/{ENDPOINT}/noop", Tally())
                    return ready
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{replicas} worker(s) of {ENDPOINT} not ready within {timeout:g}s: {workers}")


async def wait_for_route(session: Any, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            await get_noop(session, url, Tally())
            return
        except Exception as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout:g}s ({last})")


async def run_all(args: argparse.Namespace, tmp: Path, started: list[Target], log: Any) -> dict[str, Any]:
    import aiohttp

    results: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(limit=args.concurrency, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, headers=HEADERS, timeout=timeout) as session:
        fp = start_flashpoint(tmp, args.replicas)
        started.append(fp)
        addresses = await wait_for_flashpoint(session, fp.url, args.replicas, timeout=60)
        fp.watch()
        print(f"flashpoint serving at {fp.url}, {len(addresses)} worker(s): {', '.join(addresses)}", file=log)
        ROUTE_SECRETS.update(find_route_secrets(addresses))
        direct = {
            "noop": [f"http://{a}/noop" for a in addresses],
            "stream": [f"http://{a}/stream" for a in addresses],
        }
        proxied = {"noop": [f"{fp.url}/{ENDPOINT}/noop"], "stream": [f"{fp.url}/{ENDPOINT}/stream"]}
        results.update(await measure(args, session, [("direct", fp, direct), ("proxy", fp, proxied)], log))
        fp.stop()
        started.remove(fp)
        if args.no_ray:
            return results
        began = time.monotonic()
        max_ongoing = 0 if args.ray_defaults else args.ray_max_ongoing
        ray = start_ray_serve(tmp, args.replicas, max_ongoing, access_log=args.ray_defaults)
        started.append(ray)
        ray_urls = {"noop": [f"{ray.url}/{ENDPOINT}/noop"], "stream": [f"{ray.url}/{ENDPOINT}/stream"]}
        await wait_for_route(session, ray_urls["noop"][0], timeout=120)
        ray.watch()
        print(f"Ray Serve ready in {time.monotonic() - began:.1f} s at {ray.url}", file=log)
        results.update(await measure(args, session, [("ray", ray, ray_urls)], log))
        ray.stop()
        started.remove(ray)
    return results


# --------------------------------------------------------------------------------------------------------------------
# report


def ratios(results: dict[str, Any]) -> dict[str, float]:
    direct, proxy = results["direct"], results["proxy"]
    out = {
        "proxy_over_direct": proxy["throughput"]["per_s"] / direct["throughput"]["per_s"],
        "added_p50_ms": proxy["latency"]["latency"]["p50_ms"] - direct["latency"]["latency"]["p50_ms"],
        "added_p50_ms_loaded": proxy["throughput"]["latency"]["p50_ms"] - direct["throughput"]["latency"]["p50_ms"],
        "first_chunk_added_p50_ms": proxy["first_chunk"]["first_chunk"]["p50_ms"]
        - direct["first_chunk"]["first_chunk"]["p50_ms"],
    }
    if "ray" in results:
        out["proxy_over_ray"] = proxy["throughput"]["per_s"] / results["ray"]["throughput"]["per_s"]
        out["direct_over_ray"] = direct["throughput"]["per_s"] / results["ray"]["throughput"]["per_s"]
    return out


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    names = [("direct", "(a) direct"), ("proxy", "(b) proxy"), ("ray", "(c) Ray Serve")]
    names = [(key, label) for key, label in names if key in results]
    base = results["direct"]["throughput"]["per_s"]
    cells = []
    for key, label in names:
        t, lat, fc = results[key]["throughput"], results[key]["latency"], results[key]["first_chunk"]
        cells.append(
            (
                label,
                f"{t['per_s']:,.0f}" + (f" ({t['errors']} err)" if t["errors"] else ""),
                f"{t['per_s'] / base:.2f}x",
                f"{t['latency']['p50_ms']:.2f} / {t['latency']['p99_ms']:.2f}",
                f"{lat['latency']['p50_ms']:.3f} / {lat['latency']['p99_ms']:.3f}",
                f"{fc['first_chunk']['p50_ms']:.2f} / {fc['first_chunk']['p99_ms']:.2f}",
            )
        )
    header = (
        "target",
        f"req/s ({args.concurrency} clients)",
        "vs (a)",
        "p50 / p99 ms",
        "1 client p50 / p99 ms",
        "first chunk p50 / p99 ms",
    )
    lines = [text_table(header, cells), ""]
    cpu = []
    for key, label in names:
        row = results[key]["throughput"]
        serving, client = row["serving_cpu_s"], row["client_cpu_s"]
        server = row["server_cpu_s"]
        cpu.append(
            (
                label,
                f"{serving / row['seconds']:.2f}",
                "-" if server is None else f"{server / row['seconds']:.2f}",
                f"{client / row['seconds']:.2f}",
                f"{serving / max(1, row['requests']) * 1e6:,.0f} us",
                "-" if server is None else f"{server / max(1, row['requests']) * 1e6:,.0f} us",
                f"{client / max(1, row['requests']) * 1e6:,.0f} us",
                f"{max(0.0, row['machine_busy_s'] - serving - client) / row['seconds']:.2f}",
                f"{row['machine_steal_s'] / row['seconds']:.2f}",
            )
        )
    lines.append(
        text_table(
            (
                "throughput row",
                "serving cores",
                "proxy cores",
                "load gen cores",
                "serving CPU/req",
                "proxy CPU/req",
                "load gen CPU/req",
                "other cores",
                "stolen",
            ),
            cpu,
        )
    )
    lines.append("")
    r = ratios(results)
    lines.append(
        f"proxy/direct requests/s  {r['proxy_over_direct']:.2f}x   target >= {TARGET_DIRECT}x   "
        f"{verdict(r['proxy_over_direct'] >= TARGET_DIRECT)}"
    )
    lines.append(
        f"added p50 latency        {r['added_p50_ms']:.3f} ms (1 client; {r['added_p50_ms_loaded']:.2f} ms at "
        f"{args.concurrency} clients)   target < {TARGET_ADDED_MS} ms   {verdict(r['added_p50_ms'] < TARGET_ADDED_MS)}"
    )
    if "proxy_over_ray" in r:
        lines.append(
            f"proxy/Ray Serve req/s    {r['proxy_over_ray']:.2f}x (direct/Ray Serve {r['direct_over_ray']:.2f}x)   "
            f"target >= {TARGET_RAY}x   {verdict(r['proxy_over_ray'] >= TARGET_RAY)}"
        )
    else:
        lines.append("proxy/Ray Serve req/s    not measured (--no-ray)")
    lines.append(f"first chunk, proxy - direct p50: {r['first_chunk_added_p50_ms']:.3f} ms")
    lines.append(
        "serving cores: CPU seconds of the target's whole process tree (server, workers; Ray's daemons, proxy and "
        "replicas) over the row's wall seconds; proxy: flashpoint's server process, part of them; other cores: the "
        "rest of this machine's busy time (other processes, py-spy); stolen: by the hypervisor"
    )
    return "\n".join(lines)


def run(main: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Run the load generator on uvloop when it is installed (as the servers run), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)  # type: ignore[arg-type]
    return uvloop.run(main)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 s rows")
    parser.add_argument("--replicas", type=int, default=2, help="route workers, and Ray Serve replicas (default 2)")
    parser.add_argument("--concurrency", type=int, default=50, help="concurrent clients of the throughput row (50)")
    parser.add_argument("--seconds", type=float, help="seconds of the throughput row (default 10; quick 2)")
    parser.add_argument("--rounds", type=int, help="turns direct and proxy take within each row (default 3; quick 2)")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray Serve")
    parser.add_argument(
        "--ray-max-ongoing", type=int, help="Ray Serve's max_ongoing_requests (default: every client, per replica)"
    )
    parser.add_argument(
        "--ray-defaults", action="store_true", help="Ray Serve as it comes: its max_ongoing_requests and access log"
    )
    parser.add_argument("--profile", type=Path, help="py-spy (raw) the server during the proxy's first throughput turn")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    args = parser.parse_args()
    args.seconds = args.seconds or (2.0 if args.quick else 10.0)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.latency_seconds = 1.0 if args.quick else max(1.0, args.seconds / 2)
    args.stream_seconds = 1.0 if args.quick else max(1.0, args.seconds / 2)
    args.warmup = 0.5 if args.quick else 1.0
    args.ray_max_ongoing = args.ray_max_ongoing or max(5, -(-args.concurrency // args.replicas))
    if min(args.replicas, args.concurrency, args.rounds) < 1:
        parser.error("--replicas, --concurrency and --rounds are at least 1")
    log = sys.stderr if args.json else sys.stdout
    if not args.no_ray:
        try:
            import ray.serve  # noqa: F401
        except ImportError as exc:
            print(f"Ray Serve is not installed ({exc}); running without it (pip install -e '.[bench]')", file=log)
            args.no_ray = True
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    print(
        f"{ENDPOINT}: GET /noop, {args.replicas} replica(s); {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; Python {sys.version.split()[0]}; aiohttp load generator"
        + (
            ""
            if args.no_ray
            else "; Ray Serve as it comes"
            if args.ray_defaults
            else f"; Ray Serve max_ongoing_requests {args.ray_max_ongoing}, no access log"
        ),
        file=log,
    )
    print(f"note: the load generator, the servers and their workers share these {os.cpu_count()} CPUs", file=log)
    tmp = Path(tempfile.mkdtemp(prefix="flashpoint-bench-routes-"))
    started: list[Target] = []
    try:
        results = run(run_all(args, tmp, started, log))
    except KeyboardInterrupt:
        print("interrupted: stopping what the bench started", file=sys.stderr)
        sys.exit(130)
    finally:
        for target in reversed(started):  # also on failure and Ctrl-C
            target.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        setup = {"replicas": args.replicas, "concurrency": args.concurrency, "cpus": os.cpu_count(), "load": load}
        print(json.dumps({**results, "ratios": ratios(results), **setup}, indent=2))
        return
    print()
    print(report(results, args))
    if args.profile is not None:
        print(f"\npy-spy profile of the server (raw, collapsed stacks): {args.profile}/proxy-throughput.txt")


if __name__ == "__main__":
    main()
