"""Chaos: SIGKILL random workers of a real server under load (issue 9's repeatable check; its point 5).

A real `flashpoint serve` runs ``chaos`` (up to 4 workers on the 4 simulated GPUs, 1 s idle timeout). 300 jobs are
submitted. While they run, first 6 workers are SIGKILLed each while still starting, one after the other: more than
the 5 failed starts after which an endpoint gives up on a handler that cannot start (when none is starting, a running
one is killed so that one starts). Then a random live worker process of that server, starting or not, is killed
every 0.2 s: 30 kills in all at most, for 20 s at most.

A worker killed by a signal is a lost worker, never a broken handler: its jobs follow the retry rule (back to the
queue once, then ``worker_lost``), and its endpoint is never failed with ``worker_start_failed``. Checked afterwards:
every job is terminal within a deadline, none was retried more than once, the only failures are ``worker_lost``,
every simulated device is free again once the idle workers scale down (the endpoint's minimum is 0, so a device still
held then is held by a worker that should not exist), no worker process of the server is left, and a fresh
``/runsync`` completes.
"""

from __future__ import annotations

import collections
import random
import signal
import time
from typing import Any

import httpx
import pytest

from tests.hardening.support import APP, Proc, kill_worker, until, worker_processes

pytestmark = [pytest.mark.slow, pytest.mark.hardening, pytest.mark.timeout(240)]

JOBS = 300
KILL_EVERY_S = 0.2
MAX_KILLS = 30
#: the random kills stop after this long even if MAX_KILLS was not reached (restarts may back off)
CHAOS_S = 20
#: workers killed while starting, one after the other, before the random kills (an endpoint gives up after 5)
START_KILLS = 6
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}


def _jobs(client: httpx.Client) -> list[dict[str, Any]]:
    listing = client.get("/v1/jobs", params={"endpoint": "chaos", "limit": 1000})
    assert listing.status_code == 200, listing.text
    jobs: list[dict[str, Any]] = listing.json()["jobs"]
    return jobs


def _worker_states(client: httpx.Client) -> dict[str, str]:
    answer = client.get("/v1/endpoints/chaos")
    assert answer.status_code == 200, answer.text
    return {w["id"]: w["state"] for w in answer.json()["workers"]}


def test_sigkill_random_workers_under_load(serve: Any) -> None:
    server = serve(app=APP)
    pid = server.proc.pid
    rng = random.Random(9)  # the choices are reproducible; their timing is not
    started = time.monotonic()
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client:
        ids = set()
        for n in range(JOBS):
            answer = client.post("/v2/chaos/run", json={"input": {"n": n}})
            assert answer.status_code == 200, answer.text
            ids.add(answer.json()["id"])

        kills: list[str] = []  # the state (as the plane saw it) of each worker killed

        def work_left() -> bool:
            health = client.get("/v2/chaos/health").json()["jobs"]
            return bool(health["inQueue"] or health["inProgress"])

        def kill_one(prefer_starting: bool) -> None:
            procs = worker_processes(pid)
            if not procs:
                return
            states = _worker_states(client)
            starting = [p for p in procs if states.get(p.worker_id) == "STARTING"]
            victim: Proc = rng.choice(starting if starting and prefer_starting else procs)
            if kill_worker(victim, pid, signal.SIGKILL):
                kills.append(states.get(victim.worker_id, "(not listed)"))

        # First a burst: every starting worker is killed before it takes a job, START_KILLS times in a row (more than
        # the failed starts after which an endpoint gives up); when none is starting, a running one is killed so
        # that one starts. These are lost workers, not a handler that cannot start.
        burst_end = time.monotonic() + 30
        while kills.count("STARTING") < START_KILLS and time.monotonic() < burst_end and work_left():
            kill_one(prefer_starting=True)
            time.sleep(0.05)  # how often the burst looks for a starting worker
        # Then a random live worker (starting or not) every 0.2 s, MAX_KILLS kills in all, for CHAOS_S at most.
        chaos_end = time.monotonic() + CHAOS_S
        while len(kills) < MAX_KILLS and time.monotonic() < chaos_end and work_left():
            kill_one(prefer_starting=False)
            time.sleep(KILL_EVERY_S)  # the chaos's own pace, not a wait for a condition
        chaos_s = time.monotonic() - started

        def all_terminal() -> list[dict[str, Any]] | None:
            jobs = _jobs(client)
            return jobs if all(job["status"] in TERMINAL for job in jobs) else None

        try:
            jobs = until(all_terminal, 120, f"all {JOBS} jobs to reach a terminal state")
        except AssertionError:
            left = collections.Counter(job["status"] for job in _jobs(client))
            raise AssertionError(f"not every job ended within 120 s after {len(kills)} kills: {dict(left)}") from None
        assert {job["id"] for job in jobs} == ids

        outcomes = collections.Counter((job["status"], job["reason"]) for job in jobs)
        summary = f"{len(kills)} kills {dict(collections.Counter(kills))}; outcomes {dict(outcomes)}"
        over = [job for job in jobs if job["retries"] > 1]
        assert not over, f"{len(over)} job(s) retried more than once, e.g. {over[0]}; {summary}"
        wrong = [job for job in jobs if job["status"] != "COMPLETED" and job["reason"] != "worker_lost"]
        assert not wrong, (
            f"{len(wrong)} job(s) ended otherwise than COMPLETED or FAILED worker_lost; a worker killed by a signal "
            f"is a lost worker, not a failed start. First: {wrong[0]['status']} {wrong[0]['reason']} "
            f"{(wrong[0]['error'] or {}).get('message', '')[:300]!r}; {summary}"
        )
        assert all(job["status"] == "COMPLETED" for job in jobs if job["reason"] != "worker_lost"), summary
        assert kills.count("STARTING") >= START_KILLS, f"too few workers were killed while starting: {summary}"
        assert len(kills) >= 10, f"the chaos hardly happened: {summary}"

        def devices_free() -> bool:
            fleet = client.get("/v1/fleet").json()["devices"]
            return all(row["worker"] is None for row in fleet)

        until(devices_free, 30, "every simulated device to be free once the idle workers scaled down")
        until(lambda: not worker_processes(pid), 10, "every worker process of the server to exit")

        fresh = client.post("/v2/chaos/runsync", json={"input": {"n": -1}}, params={"wait": 60_000}, timeout=90)
        assert fresh.status_code == 200, fresh.text
        assert fresh.json()["status"] == "COMPLETED" and fresh.json()["output"] == -1, fresh.text
    print(f"chaos for {chaos_s:.1f}s, {time.monotonic() - started:.1f}s in all; {summary}")
