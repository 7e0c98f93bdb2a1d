"""What a waiting caller sees on its terminal: a progress bar for many jobs (``fn.map``), and one live line for a call
that waits in the queue, with the reason.

Both write to standard error, and only when it is a terminal (never into a pipe, a log file or a notebook's captured
output) and ``FLASHPOINT_PROGRESS`` is not ``0``; ``progress=False`` on ``map`` turns the bar off too. They only read
(job statuses, explanations): a display that fails never fails the call, it goes quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import IO, TYPE_CHECKING, Any

from flashpoint.jobs import JobStatus
from flashpoint.terminal import inert

if TYPE_CHECKING:
    from flashpoint.sdk.connection import Connection

log = logging.getLogger("flashpoint")

#: seconds a call waits in the queue before its live line appears, and between two refreshes of it
WAIT_LINE_AFTER_S = 3.0
WAIT_LINE_EVERY_S = 2.0
#: seconds between two refreshes of the bar's running/queued counts, and the most job statuses read per refresh
BAR_EVERY_S = 1.0
BAR_POLLS = 64


def interactive(stream: IO[str] | None = None) -> bool:
    """Whether progress may be drawn: ``stream`` (standard error) is a terminal and ``FLASHPOINT_PROGRESS`` is not 0."""
    if os.environ.get("FLASHPOINT_PROGRESS", "").strip() in ("0", "false", "no", "off"):
        return False
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def waiting_text(summary: str) -> str:
    """The live line's words for an explanation's summary, on one line and inert (it may name other processes that
    hold the devices, from their lease records)."""
    return f"waiting in the queue: {inert(summary, lines=False)}"


@contextlib.asynccontextmanager
async def wait_line(conn: Connection, job_id: str, *, stream: IO[str] | None = None) -> AsyncIterator[None]:
    """While the body runs (a call waiting for its job), show one live line with the job's reason once it has been
    queued for ``WAIT_LINE_AFTER_S``; the line is cleared when the job leaves the queue or the body ends."""
    if not interactive(stream):
        yield
        return
    out = stream if stream is not None else sys.stderr
    task = asyncio.ensure_future(_show_wait(conn, job_id, out))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _show_wait(conn: Connection, job_id: str, out: IO[str]) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    await asyncio.sleep(WAIT_LINE_AFTER_S)  # a display's delay, not synchronisation: most calls never show it
    console = Console(file=out, stderr=True)
    try:
        with Live(Text(""), console=console, transient=True, auto_refresh=False) as live:
            while True:
                view = await conn.get(job_id)
                if view.status is not JobStatus.IN_QUEUE:
                    return
                explanation = await conn.explain_job(job_id)
                line = Text(waiting_text(explanation.summary), style="yellow", no_wrap=True, overflow="ellipsis")
                live.update(line, refresh=True)  # one line, cut to the terminal's width
                await asyncio.sleep(WAIT_LINE_EVERY_S)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the display is a courtesy: a failed read silences it, never the call
        log.debug("the waiting line stopped: %r", exc)


class MapBar:
    """The progress bar of ``fn.map``: completed, failed, running, queued, rate and ETA (``rich``)."""

    def __init__(self, name: str, total: int | None, *, stream: IO[str] | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=Console(file=stream if stream is not None else sys.stderr, stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(name, total=total, counts="", rate="")
        self.completed = self.failed = self.running = self.queued = 0
        self._started = asyncio.get_running_loop().time()

    def __enter__(self) -> MapBar:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.update()
        self._progress.stop()

    def total(self, total: int) -> None:
        self._progress.update(self._task, total=total)

    def update(self) -> None:
        done = self.completed + self.failed
        elapsed = asyncio.get_running_loop().time() - self._started
        rate = f"{done / elapsed:.1f} jobs/s" if elapsed > 0 and done else ""
        counts = (
            f"[green]{self.completed} completed[/] [red]{self.failed} failed[/] "
            f"[cyan]{self.running} running[/] {self.queued} queued"
        )
        self._progress.update(self._task, completed=done, counts=counts, rate=rate, refresh=True)
