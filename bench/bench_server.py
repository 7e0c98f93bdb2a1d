"""Server benchmark: /runsync and /run + /status of a served no-op endpoint beside a bare FastAPI echo route.

Run it with ``python bench/bench_server.py`` (``--quick`` for a short run, ``--json`` for machine-readable output,
``--keyless`` to serve without an API key, so that every request crosses the loopback guard).
A real ``flashpoint serve`` process (simulated GPUs ``NVIDIA_A100_80GB_PCIe:2``, real worker processes, SQLite job
store) and a bare FastAPI app (one ``POST /echo`` route, same uvicorn settings, no auth, no store, no workers) run as
subprocesses on loopback. One load generator in this process drives each in turn with the same HTTP client and the
same number of concurrent clients (default 50), each sending ``{"input": {"x": 1}}``:

  (a) bare route:         POST /echo                                        requests/s, latency p50/p99
  (b) flashpoint runsync: POST /v2/noop/runsync                             jobs/s, latency p50/p99
  (c) flashpoint run:     POST /v2/noop/run, then GET /v2/noop/status/{id}  jobs/s, submit-to-COMPLETED p50/p99,
                          polled every ~2 ms until COMPLETED                 and HTTP requests/s

The ratios (b)/(a) and (c)/(a), in jobs per second, are printed beside the target (>= 0.5x the bare route's
requests/s). The load generator, the server and its workers share this machine's CPUs, so the absolute figures say
as much about the load generator as about the server: compare ratios from one run, not figures across machines.
A script, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import percentiles, text_table

FLEET = "NVIDIA_A100_80GB_PCIe:2"
API_KEY = "bench-key"
PAYLOAD = {"input": {"x": 1}}
HEADERS = {"Authorization": f"Bearer {API_KEY}"}
REQUEST_TIMEOUT_S = 30.0
POLL_SLEEP_S = 0.002
#: flashpoint jobs/s over the bare route's requests/s
TARGET = 0.5

APP = textwrap.dedent(
    """
    from typing import Any

    from flashpoint import Endpoint, GpuGroup


    @Endpoint(name="noop", gpu=GpuGroup.ANY, workers=2, scaler_type="REQUEST_COUNT", scaler_value=1{extra})
    async def noop(**payload: Any) -> dict[str, Any]:
        return payload
    """
)

# The anchor: the same uvicorn settings as `flashpoint serve` (its HTTP protocol, which writes a response in one
# write; log_level warning, no access log, keep-alive 120 s, a pre-bound loopback socket with TCP_NODELAY), one lean
# route that parses the body and echoes its "input".
BARE = textwrap.dedent(
    """
    import socket

    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from flashpoint.api.transport import CoalescingHttpToolsProtocol

    app = FastAPI()


    @app.post("/echo")
    async def echo(request: Request) -> JSONResponse:
        data = await request.json()
        return JSONResponse({"id": "x", "status": "COMPLETED", "output": data["input"]})


    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    print(f"bare serving echo on http://127.0.0.1:{sock.getsockname()[1]} (fastapi)", flush=True)
    config = uvicorn.Config(
        app, http=CoalescingHttpToolsProtocol, log_level="warning", access_log=False, timeout_keep_alive=120
    )
    uvicorn.Server(config).run(sockets=[sock])
    """
)


# --------------------------------------------------------------------------------------------------------------------
# helpers


@dataclass
class Process:
    """A server subprocess and the base URL it printed."""

    url: str
    proc: subprocess.Popen[str]

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def start_process(command: list[str], env: dict[str, str], marker: str, timeout: float = 60) -> Process:
    """Start ``command`` and wait (bounded) for the stdout line containing ``marker`` and ``on http://...``."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if marker in line:
                break
    match = re.search(r" on (http://\S+) ", line)
    if match is None:
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"{command[:4]} did not start within {timeout}s (exit {proc.returncode}); last: {line!r}")
    return Process(match.group(1), proc)


def start_flashpoint(tmp: Path, max_concurrency: int, keyless: bool = False) -> Process:
    """``keyless``: without an API key, so every request crosses the loopback guard (api/loopguard.py) and the job
    routes' Content-Type check instead of the key check; the clients' Authorization header is then ignored."""
    app = tmp / "bench_server_app.py"
    app.write_text(APP.format(extra=f", max_concurrency={max_concurrency}" if max_concurrency > 1 else ""))
    env = {
        **{k: v for k, v in os.environ.items() if k != "FLASHPOINT_API_KEY"},
        "FLASHPOINT_SIMULATED_GPUS": FLEET,
        "FLASHPOINT_STATE_DIR": str(tmp),
    }
    if not keyless:
        env["FLASHPOINT_API_KEY"] = API_KEY
    command = [sys.executable, "-m", "flashpoint", "serve", str(app), "--port", "0", "--db", str(tmp / "jobs.db")]
    return start_process(command, env, "flashpoint serving")


def start_bare() -> Process:
    return start_process([sys.executable, "-c", BARE], dict(os.environ), "bare serving")


# --------------------------------------------------------------------------------------------------------------------
# HTTP clients: the same small interface over aiohttp or httpx


class Client:
    async def post(self, url: str, body: dict[str, Any]) -> tuple[int, Any]:
        raise NotImplementedError

    async def get(self, url: str) -> tuple[int, Any]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class AiohttpClient(Client):
    def __init__(self, concurrency: int) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
        self.session = aiohttp.ClientSession(
            connector=connector, headers=HEADERS, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        )

    async def post(self, url: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with self.session.post(url, json=body) as response:
            return response.status, await response.json(content_type=None)

    async def get(self, url: str) -> tuple[int, Any]:
        async with self.session.get(url) as response:
            return response.status, await response.json(content_type=None)

    async def close(self) -> None:
        await self.session.close()


class HttpxClient(Client):
    def __init__(self, concurrency: int) -> None:
        import httpx

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.client = httpx.AsyncClient(headers=HEADERS, timeout=REQUEST_TIMEOUT_S, limits=limits)

    async def post(self, url: str, body: dict[str, Any]) -> tuple[int, Any]:
        response = await self.client.post(url, json=body)
        return response.status_code, response.json()

    async def get(self, url: str) -> tuple[int, Any]:
        response = await self.client.get(url)
        return response.status_code, response.json()

    async def close(self) -> None:
        await self.client.aclose()


CLIENTS: dict[str, Callable[[int], Client]] = {"aiohttp": AiohttpClient, "httpx": HttpxClient}


# --------------------------------------------------------------------------------------------------------------------
# load generator


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    http_requests: int = 0
    errors: int = 0
    first_error: str = ""

    def fail(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what


#: one unit of work (a request, or a job with its polls) on ``client``, counted in ``tally``; True when it succeeded
Operation = Callable[[Client, Tally], Awaitable[bool]]


def echo_op(url: str) -> Operation:
    async def op(client: Client, tally: Tally) -> bool:
        tally.http_requests += 1
        status, body = await client.post(f"{url}/echo", PAYLOAD)
        if status != 200 or body.get("output") != PAYLOAD["input"]:
            tally.fail(f"/echo answered {status}: {str(body)[:200]}")
            return False
        return True

    return op


def runsync_op(url: str) -> Operation:
    async def op(client: Client, tally: Tally) -> bool:
        tally.http_requests += 1
        status, body = await client.post(f"{url}/v2/noop/runsync", PAYLOAD)
        if status != 200 or body.get("status") != "COMPLETED" or body.get("output") != PAYLOAD["input"]:
            tally.fail(f"/runsync answered {status}: {str(body)[:200]}")
            return False
        return True

    return op


def run_status_op(url: str) -> Operation:
    async def op(client: Client, tally: Tally) -> bool:
        tally.http_requests += 1
        status, body = await client.post(f"{url}/v2/noop/run", PAYLOAD)
        if status != 200 or "id" not in body:
            tally.fail(f"/run answered {status}: {str(body)[:200]}")
            return False
        status_url = f"{url}/v2/noop/status/{body['id']}"
        deadline = time.perf_counter() + REQUEST_TIMEOUT_S
        while time.perf_counter() < deadline:
            tally.http_requests += 1
            status, body = await client.get(status_url)
            state = body.get("status") if status == 200 else None
            if state == "COMPLETED":
                if body.get("output") != PAYLOAD["input"]:
                    tally.fail(f"/status output {str(body)[:200]}")
                    return False
                return True
            if state not in ("IN_QUEUE", "IN_PROGRESS"):
                tally.fail(f"/status answered {status}: {str(body)[:200]}")
                return False
            await asyncio.sleep(POLL_SLEEP_S)
        tally.fail(f"job {status_url} not COMPLETED within {REQUEST_TIMEOUT_S}s")
        return False

    return op


async def drive(
    client: Client, op: Operation, concurrency: int, seconds: float, requests: int | None
) -> dict[str, Any]:
    """``concurrency`` coroutines repeat ``op`` until ``seconds`` pass (or ``requests`` ops were started)."""
    tally = Tally()
    started = 0
    end = time.perf_counter() + seconds

    async def one_client() -> None:
        nonlocal started
        while (started < requests) if requests is not None else (time.perf_counter() < end):
            started += 1
            t0 = time.perf_counter()
            try:
                ok = await op(client, tally)
            except Exception as exc:  # a timeout or a dropped connection counts as an error, the run goes on
                tally.fail(f"{type(exc).__name__}: {exc}")
                ok = False
            if ok:
                tally.latencies.append(time.perf_counter() - t0)
            if tally.errors > 100:
                return

    start = time.perf_counter()
    overall = (seconds if requests is None else 600.0) + 2 * REQUEST_TIMEOUT_S
    await asyncio.wait_for(asyncio.gather(*(one_client() for _ in range(concurrency))), overall)
    elapsed = time.perf_counter() - start
    done = len(tally.latencies)
    if tally.errors:
        print(f"  {tally.errors} error(s); first: {tally.first_error}", file=sys.stderr)
    return {
        "ops": done,
        "errors": tally.errors,
        "seconds": elapsed,
        "per_s": done / elapsed,
        "http_requests": tally.http_requests,
        "http_per_s": tally.http_requests / elapsed,
        "latency": percentiles(tally.latencies),
    }


async def wait_for_workers(client: Client, url: str, want: int, timeout: float) -> int:
    """Warm flashpoint up: a few /runsync calls, then concurrent ones until ``want`` workers are ready (bounded)."""
    for _ in range(5):
        await runsync_op(url)(client, Tally())
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        await asyncio.gather(*(runsync_op(url)(client, Tally()) for _ in range(20)))
        status, health = await client.get(f"{url}/v2/noop/health")
        ready = health["workers"]["ready"] if status == 200 else 0
        if ready >= want:
            break
    return ready


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process so far, from /proc (None where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """Direct child processes (the server's workers), from /proc; empty where there is no /proc."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        pass
    return found


class CpuMeter:
    """CPU seconds used during a measurement by the server, by its workers and by this load generator."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.kids = children(pid)
        self.start = self._read()

    def _read(self) -> dict[str, float | None]:
        kids = [cpu_seconds(k) for k in self.kids]
        return {
            "server": cpu_seconds(self.pid),
            "workers": sum(k for k in kids if k is not None) if kids else None,
            "client": time.process_time(),
        }

    def stop(self) -> dict[str, float | None]:
        end = self._read()
        used: dict[str, float | None] = {}
        for key, begin in self.start.items():
            finish = end[key]
            used[f"{key}_cpu_s"] = finish - begin if begin is not None and finish is not None else None
        return used


def start_py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        print("  --profile: py-spy not found, skipped", file=sys.stderr)
        return None
    command = [py_spy, "record", "-p", str(pid), "-f", "raw", "-o", str(out), "-d", str(max(1, int(seconds))),
               "--nonblocking", "--subprocesses"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(args: argparse.Namespace, bare: Process, fp: Process, log: Any) -> dict[str, Any]:
    client = CLIENTS[args.client](args.concurrency)
    try:
        ready = await asyncio.wait_for(wait_for_workers(client, fp.url, 2, timeout=60), 120)
        print(f"flashpoint warmed up: {ready} worker(s) ready", file=log)
        phases = [
            ("bare", "(a) bare FastAPI POST /echo", echo_op(bare.url), bare),
            ("runsync", "(b) flashpoint POST /runsync", runsync_op(fp.url), fp),
            ("run_status", "(c) flashpoint /run + /status", run_status_op(fp.url), fp),
        ]
        results: dict[str, Any] = {}
        for key, label, op, target in phases:
            # untimed warm-up at the same concurrency: connections open, caches and workers warm
            await drive(client, op, args.concurrency, args.warmup, None)
            profiler = None
            if args.profile is not None and target is fp:
                args.profile.mkdir(parents=True, exist_ok=True)
                seconds = min(5.0, args.duration) if args.requests is None else 5.0
                profiler = start_py_spy(fp.proc.pid, seconds, args.profile / f"{key}.txt")
            print(f"{label}: {args.concurrency} clients, "
                  f"{f'{args.requests} ops' if args.requests else f'{args.duration:g} s'}", file=log)  # fmt: skip
            meter = CpuMeter(target.proc.pid)
            results[key] = await drive(client, op, args.concurrency, args.duration, args.requests)
            results[key].update(meter.stop())
            if profiler is not None:
                try:
                    profiler.wait(30)
                except subprocess.TimeoutExpired:
                    profiler.kill()
                    profiler.wait(10)
        return results
    finally:
        await client.close()


# --------------------------------------------------------------------------------------------------------------------
# report


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Jobs/s of (b) and (c) over the bare route's requests/s (the target's ratio), and (c)'s HTTP requests/s too."""
    base = results["bare"]["per_s"]
    return {
        "runsync": results["runsync"]["per_s"] / base,
        "run_status": results["run_status"]["per_s"] / base,
        "run_status_http": results["run_status"]["http_per_s"] / base,
    }


def verdict(ratio: float) -> str:
    return f">= {TARGET:.1f}x  {'ok' if ratio >= TARGET else 'MISSED'}"


def table(results: dict[str, Any]) -> str:
    r = ratios(results)
    rows = [
        ("(a) bare FastAPI POST /echo", "bare", "req/s", None),
        ("(b) flashpoint /runsync", "runsync", "jobs/s", r["runsync"]),
        ("(c) flashpoint /run + /status", "run_status", "jobs/s", r["run_status"]),
    ]
    cells: list[tuple[str, ...]] = []
    for label, key, unit, ratio in rows:
        row = results[key]
        lat = row["latency"]
        cells.append(
            (
                label,
                f"{row['per_s']:,.0f} {unit}",
                f"{row['http_per_s']:,.0f}",
                f"{lat['p50_ms']:.2f} ms",
                f"{lat['p99_ms']:.2f} ms",
                f"{row['ops']:,}" + (f" ({row['errors']} err)" if row["errors"] else ""),
                f"{ratio:.2f}x" if ratio is not None else "1.00x",
                verdict(ratio) if ratio is not None else "",
            )
        )
    header = ("measurement", "throughput", "HTTP req/s", "p50", "p99", "done", "vs (a)", "target")
    lines = [text_table(header, cells), ""]
    lines.append(cpu_table(results))
    lines.append("")
    run_status = results["run_status"]
    per_job = run_status["http_requests"] / max(1, run_status["ops"] + run_status["errors"])
    lines.append("vs (a): jobs/s over the bare route's requests/s; the target is the issue's >= 0.5x")
    lines.append(
        f"(c) made {per_job:.1f} HTTP requests per job (one /run, the rest /status polls); its HTTP requests/s are "
        f"{r['run_status_http']:.2f}x the bare route's"
    )
    lines.append("latency: (a), (b) one request; (c) from POST /run to the /status that said COMPLETED")
    return "\n".join(lines)


def cpu_table(results: dict[str, Any]) -> str:
    """Cores busy during each measurement (CPU seconds over wall seconds), and the server's CPU per operation."""

    def cores(row: dict[str, Any], key: str) -> str:
        value = row.get(f"{key}_cpu_s")
        return "-" if value is None else f"{value / row['seconds']:.2f}"

    header = ("CPU, cores busy", "server", "workers", "load generator", "server CPU per op")
    cells: list[tuple[str, ...]] = []
    for label, key in (("(a) bare", "bare"), ("(b) runsync", "runsync"), ("(c) run + status", "run_status")):
        row = results[key]
        server_s = row.get("server_cpu_s")
        per_op = "-" if server_s is None or not row["ops"] else f"{server_s / row['ops'] * 1e6:,.0f} us"
        workers = cores(row, "workers") if key != "bare" else "-"
        cells.append((label, cores(row, "server"), workers, cores(row, "client"), per_op))
    return text_table(header, cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short run: 3 s per measurement")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--duration", type=float, help="seconds per measurement (default 10; quick 3)")
    parser.add_argument("--requests", type=int, help="a fixed number of operations per measurement instead")
    parser.add_argument("--concurrency", type=int, default=50, help="concurrent clients (default 50)")
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=1,
        help="jobs each of the 2 workers runs at once (default 1, as in the issue; each is one serial round trip)",
    )
    parser.add_argument("--client", choices=sorted(CLIENTS), default="aiohttp", help="HTTP client (default aiohttp)")
    parser.add_argument("--profile", type=Path, help="py-spy (raw) the server and its workers into this folder")
    parser.add_argument(
        "--keyless", action="store_true", help="serve without an API key: requests cross the loopback guard instead"
    )
    parser.add_argument("--overall-timeout", type=float, default=600.0, help="seconds allowed for the whole run")
    args = parser.parse_args()
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    args.warmup = 0.5 if args.quick else 1.0

    log = sys.stderr if args.json else sys.stdout
    cpus = os.cpu_count()
    print(
        f"flashpoint serve on simulated GPUs ({FLEET}) vs a bare FastAPI route; {cpus} CPUs; "
        f"Python {sys.version.split()[0]}; client {args.client}; {args.concurrency} clients; "
        f"noop: 2 workers x max_concurrency {args.max_concurrency}; "
        f"{'keyless (the loopback guard checks each request)' if args.keyless else 'with an API key'}",
        file=log,
    )
    print(f"note: the load generator, both servers and the workers share these {cpus} CPUs", file=log)
    tmp = Path(tempfile.mkdtemp(prefix="flashpoint-bench-server-"))
    bare = fp = None
    try:
        bare = start_bare()
        fp = start_flashpoint(tmp, args.max_concurrency, args.keyless)
        results = asyncio.run(asyncio.wait_for(measure(args, bare, fp, log), args.overall_timeout))
    finally:
        for process in (fp, bare):
            if process is not None:
                process.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        body: dict[str, Any] = {
            **results,
            "ratios": ratios(results),
            "target": {"op": ">=", "ratio": TARGET},
            "fleet": FLEET,
            "cpus": cpus,
            "concurrency": args.concurrency,
            "client": args.client,
            "max_concurrency": args.max_concurrency,
            "keyless": args.keyless,
        }
        print(json.dumps(body, indent=2))
        return
    print()
    print(table(results))
    if args.profile is not None:
        print(f"\npy-spy profiles (raw, server + workers): {args.profile}/runsync.txt, {args.profile}/run_status.txt")


if __name__ == "__main__":
    main()
