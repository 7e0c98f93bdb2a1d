"""The ``flashpoint serve`` console: one line per finished job, and the level of worker lines.

A line per job that ends, once its end is durable (the plane's listeners)::

    echo 3f2a...-fp COMPLETED in 0.41s on NVIDIA H200 (simulated) [0] node-a
    train 9b1c...-fp FAILED in 2.03s on NVIDIA A100 80GB PCIe [1] node-a: user_error: ValueError: bad shape

at INFO on the ``flashpoint.jobs`` logger (failures at WARNING), so ``--log-level warning`` keeps the failures only.

Worker lines are logged by the plane at the level the worker printed them (``wire.line_level``), so a console at INFO
shows no worker DEBUG chatter unless ``--log-level debug`` asks for it.

Every line the console prints is inert (``terminal.InertFormatter``): worker lines, jobs' errors and tracebacks, and
other processes' lease records quoted in the plane's warnings come from others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flashpoint.jobs import JobStatus, JobView
from flashpoint.terminal import InertFormatter

log = logging.getLogger("flashpoint.jobs")


def job_line(view: JobView) -> str:
    """One finished job in words: endpoint, id, status, how long it ran, where, and why it failed."""
    seconds = (view.execution_time_ms or 0) / 1000
    text = f"{view.endpoint} {view.id} {view.status.value} in {seconds:.2f}s"
    placement = view.placement
    if placement is not None:
        if placement.gpu_model:
            where = placement.gpu_model + (" (simulated)" if placement.simulated else "")
            where += f" [{','.join(str(d) for d in placement.device_ids)}]"
        elif placement.cpu_instance:
            where = f"{placement.cpu_instance} cores [{','.join(str(c) for c in placement.cores)}]"
        else:
            where = "CPU"
        text += f" on {where} {placement.node}"
    elif view.status is not JobStatus.COMPLETED:
        text += " (never ran)"
    if view.status is not JobStatus.COMPLETED:
        reason = view.reason.value if view.reason else "?"
        error = view.error
        detail = (
            f"{error.type}: {error.message.strip().splitlines()[0] if error.message.strip() else ''}" if error else ""
        )
        text += f": {reason}" + (f": {detail[:300]}" if detail else "")
    return text


def job_level(view: JobView) -> int:
    """INFO for a job that completed or was cancelled, WARNING for one that failed or timed out."""
    return logging.WARNING if view.status in (JobStatus.FAILED, JobStatus.TIMED_OUT) else logging.INFO


def log_finished(view: JobView) -> None:
    """A plane listener: the line of a finished job."""
    log.log(job_level(view), "%s", job_line(view))


LEVEL_NAMES = ("debug", "info", "warning", "error")
#: the console's line: when, which logger, the level, the message
FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


def inert_handler(fmt: str = FORMAT) -> logging.Handler:
    """A handler on stderr whose lines are inert: what a console (``serve``, ``dev``) logs through."""
    handler = logging.StreamHandler()
    handler.setFormatter(InertFormatter(fmt))
    return handler


def configure(level: str) -> Callable[[JobView], None]:
    """The console's logging at ``level`` (one of ``LEVEL_NAMES``); the listener to give the plane."""
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[inert_handler()])
    logging.getLogger().setLevel(getattr(logging, level.upper()))
    return log_finished
