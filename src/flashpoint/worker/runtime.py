"""Inside a worker process: pull jobs over the Runpod worker protocol, run them (``handler.Handler``), post results.

The worker reads the same variables an unmodified ``runpod.serverless.start`` worker reads (``RUNPOD_WEBHOOK_GET_JOB``,
``RUNPOD_WEBHOOK_POST_OUTPUT``, ``RUNPOD_WEBHOOK_POST_STREAM``, ``RUNPOD_WEBHOOK_PING``, ``RUNPOD_AI_API_KEY``,
``RUNPOD_POD_ID``, ``RUNPOD_PING_INTERVAL``), so the control plane serves one protocol to both. It takes jobs with
Runpod's job-take-batch, and adds one route beside it, job-done-batch: the results that finished together go in one
post whose answer, held by the plane until there is work, carries the next jobs (result-carries-next-job, per batch).
Never imports ``flashpoint.store`` or ``scheduler``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TextIO

from flashpoint.jobs import Reason
from flashpoint.sdk.context import current_job_id, reset_current_job, set_current_job
from flashpoint.wire import codec, coldstart, protocol
from flashpoint.worker import isolation
from flashpoint.worker.handler import (
    LOAD_PHASES,
    Emit,
    Handler,
    HandlerError,
    error_body,
    load_target,
    max_instances,
)
from flashpoint.worker.launch import die_with_parent

log = logging.getLogger("flashpoint.worker")


# --------------------------------------------------------------------------------------------------------------------
# Output tagging


class TaggedStream:
    """Wraps stdout/stderr: each complete line printed while a job runs is prefixed with that job's id."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._partial: dict[str | None, str] = {}

    def write(self, text: str) -> int:
        job = current_job_id()
        buffered = self._partial.pop(job, "") + text
        *lines, rest = buffered.split("\n")
        if rest:
            self._partial[job] = rest
        prefix = protocol.tag_line(job) if job else ""
        for line in lines:
            self._inner.write(f"{prefix}{line}\n")
        if lines:
            self._inner.flush()
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# --------------------------------------------------------------------------------------------------------------------
# The pull loop


@dataclass(frozen=True, slots=True)
class Urls:
    """The worker's URL templates, already holding its id (Runpod's substitution rules, runpod-protocol.md §3.3)."""

    take: str
    done: str
    chunk: str
    ping: str

    @property
    def take_batch(self) -> str:
        """Runpod's job-take-batch, derived from job-take as Runpod's worker derives it."""
        return self.take.replace("/job-take/", "/job-take-batch/")

    @property
    def done_batch(self) -> str:
        """flashpoint's job-done-batch: several results in one post, whose answer may carry the next jobs."""
        return self.take.replace("/job-take/", "/job-done-batch/")

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Urls:
        worker_id = env["RUNPOD_POD_ID"]
        return cls(
            take=env["RUNPOD_WEBHOOK_GET_JOB"].replace("$ID", worker_id),
            done=env["RUNPOD_WEBHOOK_POST_OUTPUT"].replace("$RUNPOD_POD_ID", worker_id),
            chunk=env.get("RUNPOD_WEBHOOK_POST_STREAM", "").replace("$RUNPOD_POD_ID", worker_id),
            ping=env.get("RUNPOD_WEBHOOK_PING", "").replace("$RUNPOD_POD_ID", worker_id),
        )


class Runtime:
    """Runs up to ``concurrency`` jobs at once, pulling them over the worker protocol.

    One exchange at a time may take jobs: it posts the results that finished since the last one and asks for as many
    jobs as there are free slots (``job-done-batch?take=N``, or ``job-take-batch`` with no results), and the plane
    holds it until there is work. Results that finish while that exchange is held go out in a result-only post. So a
    busy worker makes one round trip per batch of jobs, and one per job when it runs one at a time.

    A ``single_use`` worker (a run-to-completion endpoint's) stops taking jobs once it has its first: it runs it,
    posts its result, and ``run`` returns.
    """

    def __init__(
        self,
        handler: Callable[[dict[str, Any], Emit], Awaitable[Any]],
        urls: Urls,
        api_key: str,
        *,
        concurrency: int = 1,
        ping_interval_s: float = 10.0,
        parent_pid: int | None = None,
        max_post_bytes: int = codec.MAX_RESULT_BYTES,
        single_use: bool = False,
        phases: str = "",
    ) -> None:
        self.handler = handler
        #: the cold-start phases only this process sees (``wire/coldstart.py``'s header), sent on its first take
        self._phases = phases
        #: a class's constructor is measured in the first job (``Target._construct``): reported with a result
        self._init_pending = "init" not in coldstart.parse(phases)
        self.single_use = single_use
        self.urls = urls
        self.api_key = api_key
        self.concurrency = 1 if single_use else concurrency  # a single-use worker asks for one job
        self.ping_interval_s = ping_interval_s
        self.parent_pid = parent_pid
        #: the control plane refuses a post larger than this (its max_result_bytes)
        self.max_post_bytes = max_post_bytes
        self.stopping = asyncio.Event()
        self.running: dict[str, asyncio.Task[dict[str, Any]]] = {}
        #: results not yet acknowledged, as JSON: posted again if an exchange fails (job-done is idempotent), never
        #: recomputed
        self._outbox: list[bytes] = []
        #: exchanges in flight, with the results each carries
        self._exchanges: dict[asyncio.Task[list[dict[str, Any]]], list[bytes]] = {}
        #: the one exchange in flight that may bring jobs
        self._taker: asyncio.Task[list[dict[str, Any]]] | None = None
        self._wake = asyncio.Event()
        #: backing off after a failed request: no new exchange until the back-off timer clears it
        self._paused: asyncio.TimerHandle | None = None
        #: stops that came before their job started (its take's answer and the stop travel on two connections), and
        #: jobs that ended here lately (a late stop for one of those must not stop a later run of the same id)
        self._stop_early: OrderedDict[str, None] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()

    async def run(self) -> None:
        import aiohttp  # aiohttp rather than httpx here: about 4x less time per request on the hot path

        connector = aiohttp.TCPConnector(limit=self.concurrency + 4)
        timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=95.0)
        headers = {"Authorization": self.api_key, "Content-Type": "application/json"}
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
            self.session = session
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
            helpers = [asyncio.create_task(self._stop_channel()), asyncio.create_task(self._watch_parent())]
            if self.urls.ping:
                helpers.append(asyncio.create_task(self._ping()))
            try:
                await self._pump()
            finally:
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)

    async def _request(
        self, method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        async with self.session.request(method, url, data=data, headers=headers) as response:
            return response.status, await response.read()

    def stop(self) -> None:
        """Stop taking jobs; jobs already running finish and post their results."""
        self.stopping.set()
        if self._taker is not None:
            self._taker.cancel()  # a held take; results it carried are posted again, without asking for work
        self._wake.set()

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            stopping = self.stopping.is_set()
            if stopping and not (self.running or self._outbox or self._exchanges):
                return
            free = self.concurrency - len(self.running)
            if self._paused is None:
                if self._taker is None and free > 0 and not stopping:
                    self._taker = self._exchange(self._take_outbox(), take=free)
                while self._outbox:  # what one post could not carry
                    self._exchange(self._take_outbox(), take=0)
            await self._wake.wait()
            self._wake.clear()
            for task in [t for t in self._exchanges if t.done()]:
                results = self._exchanges.pop(task)
                if task is self._taker:
                    self._taker = None
                if task.cancelled():
                    self._outbox[:0] = results
                    continue
                error = task.exception()
                if error is not None:  # the control plane is unreachable or answered badly: back off, never spin
                    self._outbox[:0] = results
                    failures += 1
                    log.warning("worker request failed (%s: %s); retrying", type(error).__name__, error)
                    if failures > 20:
                        log.error("control plane unreachable; worker exits")
                        self.stopping.set()
                        return
                    delay = min(0.05 * 2**failures, 2.0)
                    if self._paused is not None:
                        self._paused.cancel()
                    # The timer itself ends the pause: comparing the loop's clock with a resume time instead hung
                    # the worker when the timer fired a hair early (seen under uvloop)
                    self._paused = loop.call_later(delay, self._resume)
                    continue
                failures = 0
                for job in task.result():
                    self._start(job)

    def _resume(self) -> None:
        self._paused = None
        self._wake.set()

    def _take_outbox(self) -> list[bytes]:
        """As many results, oldest first, as one post may carry (at least one: each is kept under the limit)."""
        size, count = 2, 0
        for result in self._outbox:
            if count and size + len(result) + 1 > self.max_post_bytes:
                break
            size += len(result) + 1
            count += 1
        results, self._outbox = self._outbox[:count], self._outbox[count:]
        return results

    def _encode_result(self, job_id: str, body: dict[str, Any]) -> bytes:
        """A result as JSON; one too large for the plane to take becomes the job's error instead."""
        data = codec.json_bytes({"id": job_id, **body})
        if len(data) + 2 > self.max_post_bytes:
            too_large = HandlerError(
                f"the job's result is {len(data)} bytes of JSON, more than the {self.max_post_bytes} bytes the "
                "control plane takes from a worker; return less (put large results in storage and return a "
                "reference), or raise flashpoint serve --max-result-mb",
                Reason.OUTPUT_TOO_LARGE,
            )
            data = codec.json_bytes({"id": job_id, **error_body(too_large)})
        return data

    def _exchange(self, results: list[bytes], *, take: int) -> asyncio.Task[list[dict[str, Any]]]:
        task = asyncio.ensure_future(self._post(results, take))
        self._exchanges[task] = results
        task.add_done_callback(lambda _: self._wake.set())
        return task

    async def _post(self, results: list[bytes], take: int) -> list[dict[str, Any]]:
        """Post ``results`` and/or take up to ``take`` jobs; the jobs the answer carries."""
        # the phases go with the takes until one is answered (the first take makes the worker ready); a class's
        # constructor time, measured while its first job ran, with the results once it is known
        report = coldstart.parse(self._phases) if take else {}
        late_init = bool(results) and self._init_pending and "init" in LOAD_PHASES
        if late_init:
            report["init"] = LOAD_PHASES["init"]
        headers = {coldstart.HEADER: coldstart.encode(report)} if report else None
        if results:
            url = self.urls.done_batch + (f"&take={take}" if take else "")
            response = await self._request("POST", url, b"[" + b",".join(results) + b"]", headers)
        else:
            url = f"{self.urls.take_batch}&batch_size={take}&job_in_progress={int(bool(self.running))}"
            response = await self._request("GET", url, None, headers)
        if headers is not None and response[0] < 300:
            if take:
                self._phases = ""  # reported: once is enough
            if late_init:
                self._init_pending = False
        return _jobs_from(response)

    def _start(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        if self.single_use:  # its one job (even one stopped before it starts): no other, and it ends after this one
            self.stop()
        if job_id in self._stop_early:
            del self._stop_early[job_id]
            log.info("job %s was stopped before it started; not running it", job_id)
            return
        self._ended.pop(job_id, None)
        task = asyncio.ensure_future(self._execute(job))
        self.running[job_id] = task
        task.add_done_callback(lambda done: self._finished(job_id, done))

    def _finished(self, job_id: str, task: asyncio.Task[dict[str, Any]]) -> None:
        self.running.pop(job_id, None)
        _remember(self._ended, job_id)
        # stopped through the job-stop channel (cancelled): like Runpod's worker, post nothing
        if not task.cancelled():
            error = task.exception()
            body = error_body(error) if error is not None else task.result()
            if body:
                self._outbox.append(self._encode_result(job_id, body))
        self._wake.set()

    async def _execute(self, job: dict[str, Any]) -> dict[str, Any]:
        token = set_current_job(job)
        try:
            return await self._run_handler(job)
        finally:
            reset_current_job(token)

    async def _run_handler(self, job: dict[str, Any]) -> dict[str, Any]:
        binary_ok = bool((job.get("flashpoint") or {}).get("binary_ok"))
        url = self.urls.chunk.replace("$ID", job["id"]) + "&isStream=false"

        async def emit(chunk: Any) -> None:
            body = codec.json_bytes(codec.encode_output(chunk, binary_ok=binary_ok))
            _check(await self._request("POST", url, body))

        try:
            output = await self.handler(job, emit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the job boundary: everything the handler raises becomes the job's error
            return error_body(exc)
        try:
            return codec.encode_output(output, binary_ok=binary_ok)
        except Exception as exc:
            return error_body(exc, Reason.OUTPUT_NOT_SERIALIZABLE)

    async def _stop_channel(self) -> None:
        url = self.urls.take.replace("/job-take/", "/job-stop/")
        while not self.stopping.is_set():
            try:
                status, body = await self._request("GET", url)
            except Exception:
                await asyncio.sleep(1.0)
                continue
            if status == 200:
                try:
                    ids = json.loads(body).get("jobsToStop", [])
                except (ValueError, AttributeError):
                    ids = []
                self.apply_stops(ids)
            elif status != 204:
                await asyncio.sleep(1.0)

    def apply_stops(self, ids: Any) -> None:
        """Stop these jobs: cancel the running ones (their handler gets CancelledError, and nothing is posted); one
        not started yet is remembered and never starts; one that already ended here is left alone."""
        for job_id in ids if isinstance(ids, list) else []:
            if not isinstance(job_id, str):
                continue
            task = self.running.get(job_id)
            if task is not None:
                log.info("stopping job %s", job_id)
                task.cancel()
            elif job_id not in self._ended:
                _remember(self._stop_early, job_id)

    async def _ping(self) -> None:
        while True:
            query = "&runpod_version=flashpoint" + (f"&job_id={','.join(self.running)}" if self.running else "")
            try:
                await self._request("GET", self.urls.ping + query)
            except Exception as exc:
                log.debug("ping failed: %s", exc)
            await asyncio.sleep(self.ping_interval_s)

    async def _watch_parent(self) -> None:
        # A worker must never outlive the control plane that started it (e.g. after kill -9 of the caller). On Linux
        # the kernel also sends SIGKILL at once (die_with_parent); this loop covers other systems.
        while self.parent_pid is not None:
            await asyncio.sleep(0.5)
            if os.getppid() != self.parent_pid:
                # Nobody is left to take a result, and a handler blocked in a thread would keep a graceful exit
                # waiting (and might act after a new plane has requeued its job): leave at once.
                log.warning("control plane process %s is gone; worker exits", self.parent_pid)
                os._exit(1)


def _check(response: tuple[int, bytes]) -> bool:
    status, body = response
    if status >= 400:
        raise RuntimeError(f"control plane answered {status}: {body[:200]!r}")
    return True


def _jobs_from(response: tuple[int, bytes]) -> list[dict[str, Any]]:
    """The jobs an answer carries: none (204), a list (batch) or one job object."""
    status, body = response
    if status == 204 or not body:
        return []
    _check(response)
    data = json.loads(body)
    items = data if isinstance(data, list) else [data]
    return [job for job in items if isinstance(job, dict) and "id" in job and "input" in job]


def main(import_path: str | None, pickle_file: str | None, env: dict[str, str] | None = None) -> None:
    """Entry point of ``python -m flashpoint.worker``."""
    env = dict(os.environ if env is None else env)
    parent = env.get("FLASHPOINT_PARENT_PID")
    die_with_parent(int(parent) if parent else None)
    isolation.apply()  # cores and volume, while this process has one thread
    for stream in (sys.stdout, sys.stderr):
        # a line holding text UTF-8 cannot carry (a lone surrogate, say from a file name) is printed escaped, not
        # turned into an error of the job that printed it
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    sys.stdout = TaggedStream(sys.stdout)
    sys.stderr = TaggedStream(sys.stderr)
    isolation.configure_logging()
    try:
        instances = max_instances(env)
    except ValueError as exc:
        sys.exit(str(exc))
    target = load_target(import_path, pickle_file)
    dependencies = json.loads(env.get("FLASHPOINT_DEPENDENCIES", "[]"))
    system = json.loads(env.get("FLASHPOINT_SYSTEM_DEPENDENCIES", "[]"))
    runtime = Runtime(
        Handler(target, dependencies, system, instances=instances),
        Urls.from_env(env),
        env.get("RUNPOD_AI_API_KEY", ""),
        concurrency=int(env.get("FLASHPOINT_MAX_CONCURRENCY", "1")),
        ping_interval_s=max(1.0, int(env.get("RUNPOD_PING_INTERVAL", "10000")) / 1000),
        parent_pid=int(parent) if parent else None,
        max_post_bytes=int(env.get("FLASHPOINT_MAX_RESULT_BYTES", str(codec.MAX_RESULT_BYTES))),
        single_use=env.get(protocol.SINGLE_USE_ENV) == "1",  # one job, its result, then the process ends
        phases=coldstart.encode(LOAD_PHASES),
    )
    try:
        import uvloop

        uvloop.run(runtime.run())
    except ImportError:
        asyncio.run(runtime.run())


#: how many early stops and ended jobs a worker remembers (each list is bounded; the oldest go first)
REMEMBERED = 1024


def _remember(ids: OrderedDict[str, None], job_id: str) -> None:
    ids[job_id] = None
    ids.move_to_end(job_id)
    while len(ids) > REMEMBERED:
        ids.popitem(last=False)
