"""The Runpod worker protocol as data (runpod-protocol.md §3): its routes, the variables a worker reads, the shape of
a job handed out and of an error posted back, the mark that tags a job's output lines, and the level
Runpod's logger printed a line at.

One definition serves the three parties: the control plane (which builds a worker's environment and reads its
results), ``api/workers.py`` (which serves the routes) and ``worker/runtime.py`` (which calls them). Nothing here
does I/O.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from flashpoint.jobs import JobError, Reason

#: the worker routes, relative to the plane's base URL; ``{endpoint}``, ``{worker}`` and ``{job}`` are path parameters
PREFIX = "/v2/{endpoint}"
TAKE = PREFIX + "/job-take/{worker}"
TAKE_BATCH = PREFIX + "/job-take-batch/{worker}"
STOP = PREFIX + "/job-stop/{worker}"
DONE = PREFIX + "/job-done/{worker}/{job}"
#: flashpoint's one addition: several results in one post, whose answer may carry the worker's next jobs
DONE_BATCH = PREFIX + "/job-done-batch/{worker}"
CHUNK = PREFIX + "/job-stream/{worker}/{job}"
PING = PREFIX + "/ping/{worker}"

#: the environment variable that holds a route worker's route secret, and the request header the server's proxy sends
#: it in on every request to that worker (``scheduler/credentials.route_credential``); flashpoint's route worker
#: answers 403 without it, and a command route worker may check it the same way
ROUTE_SECRET_ENV = "FLASHPOINT_ROUTE_SECRET"
ROUTE_SECRET_HEADER = "x-flashpoint-route-secret"

#: the environment variable that tells flashpoint's worker it is single-use ("1"): it takes one job, posts its result
#: and exits (a run-to-completion endpoint, decision 0111); the plane gives such a worker one job whatever it runs
SINGLE_USE_ENV = "FLASHPOINT_SINGLE_USE"

#: a line a worker prints while a job runs starts with this, the job's id and ``\x1f`` (the plane strips it)
LOG_MARK = "\x1ffp:"


def tag_line(job_id: str) -> str:
    """The prefix of an output line printed while ``job_id`` runs."""
    return f"{LOG_MARK}{job_id}\x1f"


def untag_line(line: str) -> tuple[str | None, str]:
    """``(job id, line)`` for a tagged line; ``(None, line)`` for any other."""
    if not line.startswith(LOG_MARK):
        return None, line
    job_id, _, rest = line[len(LOG_MARK) :].partition("\x1f")
    return job_id or None, rest


#: Runpod's logger prints ``f"{level.ljust(7)}| {message}"``
_RUNPOD_LINE = re.compile(r"^(DEBUG|INFO|WARN|WARNING|ERROR|TIP)\s*\|\s")
_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "TIP": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}


def line_level(line: str) -> int:
    """The level a worker's output line was printed at by Runpod's logger (text or JSON form); INFO otherwise."""
    match = _RUNPOD_LINE.match(line)
    if match:
        return _LEVELS[match.group(1)]
    if line.startswith("{") and '"level"' in line:
        try:
            record = json.loads(line)
        except ValueError:
            return logging.INFO
        if isinstance(record, dict) and isinstance(record.get("level"), str):
            return _LEVELS.get(record["level"].upper(), logging.INFO)
    return logging.INFO


def worker_env(
    base_url: str,
    endpoint: str,
    worker_id: str,
    *,
    gpu: str,
    key: str,
    ping_interval_s: float,
) -> dict[str, str]:
    """The variables an unmodified ``runpod.serverless.start`` worker reads (and flashpoint's own runtime too).

    Runpod's worker substitutes ``$ID`` and ``$RUNPOD_POD_ID`` itself; ``gpu`` travels as a query parameter, as on
    Runpod.
    """

    def url(template: str, worker: str, job: str = "") -> str:
        return f"{base_url}{template.format(endpoint=endpoint, worker=worker, job=job)}?gpu={gpu}"

    return {
        "RUNPOD_WEBHOOK_GET_JOB": url(TAKE, "$ID"),
        "RUNPOD_WEBHOOK_POST_OUTPUT": url(DONE, "$RUNPOD_POD_ID", "$ID"),
        "RUNPOD_WEBHOOK_POST_STREAM": url(CHUNK, "$RUNPOD_POD_ID", "$ID"),
        "RUNPOD_WEBHOOK_PING": url(PING, "$RUNPOD_POD_ID"),
        "RUNPOD_POD_ID": worker_id,
        "RUNPOD_AI_API_KEY": key,
        "RUNPOD_PING_INTERVAL": str(int(ping_interval_s * 1000)),
        "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
    }


def job_payload(job_id: str, payload: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """A job as job-take hands it out: its id, its input, and the rest of the job object (webhook, policy, ...)."""
    return {"id": job_id, "input": payload, **extra}


def error_record(
    error_type: str, message: str, traceback: str = "", reason: Reason = Reason.USER_ERROR, **more: str
) -> dict[str, Any]:
    """Runpod's error body: ``error`` is a JSON *string* of the traceback record; flashpoint adds ``reason``."""
    record = {"error_type": error_type, "error_message": message, "error_traceback": traceback, **more}
    record["reason"] = reason.value
    return {"error": json.dumps(record)}


def parse_error(error: Any) -> tuple[JobError, Reason]:
    """Runpod's error is a JSON string of a traceback record, or any plain value returned as ``{"error": ...}``."""
    if isinstance(error, str):
        try:
            record = json.loads(error)
        except ValueError:
            record = None
        if isinstance(record, dict) and "error_message" in record:
            kind = str(record.get("error_type", "Error"))
            if kind.startswith("<class '") and kind.endswith("'>"):
                kind = kind[8:-2]
            try:
                reason = Reason(record.get("reason", Reason.USER_ERROR.value))
            except ValueError:
                reason = Reason.USER_ERROR
            return JobError(kind, str(record["error_message"]), str(record.get("error_traceback", ""))), reason
    return JobError("Error", error if isinstance(error, str) else json.dumps(error)), Reason.USER_ERROR
