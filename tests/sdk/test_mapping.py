"""``fn.map``/``fn.starmap`` (``mapping.py``) and the terminal displays (``progress.py``) over a scripted connection:
jobs end when the test says, so order, windows, failures and cancellation are exact. The same calls against a real
embedded server with real workers are in tests/e2e/test_map.py."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from typing import Any

import pytest

from flashpoint.errors import JobFailedError
from flashpoint.explain import Explanation
from flashpoint.jobs import JobError, JobStatus, JobView, Reason
from flashpoint.sdk import progress
from flashpoint.sdk.jobhandle import JobHandle
from flashpoint.sdk.mapping import MapCall, map_calls, starmap_calls


class ScriptedConnection:
    """Jobs live here; ``end(n, ...)`` finishes the n-th job submitted. Records submissions and cancellations."""

    def __init__(self) -> None:
        self.views: dict[str, JobView] = {}
        self.payloads: list[Any] = []
        self.cancelled: list[str] = []
        self._ended: dict[str, asyncio.Event] = {}

    def ids(self) -> list[str]:
        return list(self.views)

    async def submit(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        job_id = f"j{len(self.views)}"
        self.payloads.append(payload)
        self.views[job_id] = JobView.queued(job_id, endpoint)
        self._ended[job_id] = asyncio.Event()
        return self.views[job_id]

    def set(self, job_id: str, status: JobStatus, output: Any = None, error: str | None = None) -> None:
        view = self.views[job_id]
        self.views[job_id] = dataclasses.replace(
            view,
            status=status,
            output=output,
            reason=Reason.USER_ERROR if error else (Reason.COMPLETED if status is JobStatus.COMPLETED else None),
            error=JobError("ValueError", error) if error else None,
        )
        if status.terminal:
            self._ended[job_id].set()

    def end(self, n: int, output: Any = None, *, error: str | None = None) -> None:
        status = JobStatus.FAILED if error else JobStatus.COMPLETED
        self.set(self.ids()[n], status, output, error)

    async def get(self, job_id: str) -> JobView:
        return self.views[job_id]

    async def wait(self, job_id: str, timeout: float | None) -> JobView:
        await self._ended[job_id].wait()
        return self.views[job_id]

    async def cancel(self, job_id: str) -> JobView:
        self.cancelled.append(job_id)
        if not self.views[job_id].status.terminal:
            self.set(job_id, JobStatus.CANCELLED)
        return self.views[job_id]

    async def explain_job(self, job_id: str) -> Explanation:
        return Explanation("e", "waiting for a GPU: NVIDIA H200 busy, held by other-endpoint")


def map_of(conn: ScriptedConnection, *iterables: Any, star: bool = False, **options: Any) -> MapCall:
    async def submit(args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobHandle:
        return JobHandle(conn, await conn.submit("e", {"args": list(args), "kwargs": kwargs}, {}))

    calls, total = starmap_calls(iterables[0]) if star else map_calls(iterables)
    return MapCall("e", submit, calls, total=total, progress_bar=False, **options)


async def until(check: Any) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("the map never got there")


async def test_outputs_come_in_order_although_jobs_end_out_of_order() -> None:
    conn = ScriptedConnection()
    outputs = asyncio.ensure_future(map_of(conn, [10, 20, 30]))
    await until(lambda: len(conn.views) == 3)
    assert conn.payloads == [{"args": [10], "kwargs": {}}, {"args": [20], "kwargs": {}}, {"args": [30], "kwargs": {}}]
    for n in (2, 0, 1):
        conn.end(n, n * 100)
    assert await outputs == [0, 100, 200]


async def test_unordered_outputs_come_as_jobs_end() -> None:
    conn = ScriptedConnection()
    seen: list[Any] = []

    async def consume() -> None:
        async for output in map_of(conn, ["a", "b", "c"], ordered=False):
            seen.append(output)

    task = asyncio.ensure_future(consume())
    await until(lambda: len(conn.views) == 3)
    conn.end(2, "c")
    await until(lambda: seen == ["c"])
    conn.end(0, "a")
    conn.end(1, "b")
    await task
    assert seen == ["c", "a", "b"]


async def test_the_window_bounds_the_jobs_outstanding() -> None:
    conn = ScriptedConnection()
    outputs = asyncio.ensure_future(map_of(conn, range(5), window=2))
    await until(lambda: len(conn.views) == 2)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(conn.views) == 2  # no third before one is handed back
    conn.end(0, 0)
    await until(lambda: len(conn.views) == 3)
    for n in range(1, 5):
        await until(lambda n=n: len(conn.views) > n)
        conn.end(n, n)
    assert await outputs == [0, 1, 2, 3, 4]


async def test_a_failed_job_raises_where_its_output_would_be_and_the_rest_are_cancelled() -> None:
    conn = ScriptedConnection()
    outputs = asyncio.ensure_future(map_of(conn, [1, 2, 3]))
    await until(lambda: len(conn.views) == 3)
    conn.end(0, "ok")
    conn.end(1, error="bad input 2")
    with pytest.raises(JobFailedError, match="bad input 2") as info:
        await outputs
    assert info.value.remote_type == "ValueError"
    assert conn.cancelled == ["j2"] and conn.views["j2"].status is JobStatus.CANCELLED


async def test_return_exceptions_hands_failures_back_in_place() -> None:
    conn = ScriptedConnection()
    outputs = asyncio.ensure_future(map_of(conn, [1, 2], return_exceptions=True))
    await until(lambda: len(conn.views) == 2)
    conn.end(0, error="first failed")
    conn.end(1, "second")
    first, second = await outputs
    assert isinstance(first, JobFailedError) and "first failed" in str(first) and second == "second"
    assert conn.cancelled == []


async def test_stopping_early_cancels_what_nobody_will_read() -> None:
    conn = ScriptedConnection()

    async def first_only() -> Any:
        async for output in map_of(conn, [1, 2, 3]):
            return output
        return None

    task = asyncio.ensure_future(first_only())
    await until(lambda: len(conn.views) == 3)
    conn.end(0, "one")
    assert await task == "one"
    # the loop closes the abandoned generator (its finalizer hook schedules aclose): then the rest are cancelled
    await until(lambda: len(conn.cancelled) == 2)
    assert sorted(conn.cancelled) == ["j1", "j2"]
    assert all(conn.views[j].status is JobStatus.CANCELLED for j in ("j1", "j2"))


async def test_starmap_takes_argument_tuples_and_keyword_dicts() -> None:
    conn = ScriptedConnection()
    outputs = asyncio.ensure_future(map_of(conn, [(1, 2), {"a": 3}], star=True))
    await until(lambda: len(conn.views) == 2)
    conn.end(0, 3)
    conn.end(1, 3)
    assert await outputs == [3, 3]
    assert conn.payloads == [{"args": [1, 2], "kwargs": {}}, {"args": [], "kwargs": {"a": 3}}]


def test_map_arguments_are_checked_before_anything_runs() -> None:
    with pytest.raises(TypeError, match="at least one iterable"):
        map_calls(())
    calls, total = starmap_calls([5])
    assert total == 1
    with pytest.raises(TypeError, match="argument tuples"):
        list(calls)
    assert map_calls(([1, 2, 3], "ab"))[1] == 2  # zip's length
    assert map_calls((iter([1]),))[1] is None  # unknown until exhausted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("variable", "tty", "shown"),
    [("", True, True), ("0", True, False), ("off", True, False), ("", False, False), ("1", True, True)],
)
def test_progress_is_drawn_on_a_terminal_unless_turned_off(
    variable: str, tty: bool, shown: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHPOINT_PROGRESS", variable)
    assert progress.interactive(Terminal() if tty else io.StringIO()) is shown


async def test_the_bar_counts_completed_failed_running_and_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(progress, "interactive", lambda stream=None: True)
    monkeypatch.setattr(progress, "BAR_EVERY_S", 0.0)
    conn = ScriptedConnection()

    async def submit(args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobHandle:
        return JobHandle(conn, await conn.submit("e", args, kwargs))

    calls, total = map_calls((range(4),))
    bars: list[progress.MapBar] = []
    real_bar = progress.MapBar

    def bar(name: str, count: int | None, stream: Any = None) -> progress.MapBar:
        bars.append(real_bar(name, count, stream=terminal))
        return bars[-1]

    monkeypatch.setattr(progress, "MapBar", bar)
    outputs = asyncio.ensure_future(MapCall("e", submit, calls, total=total, return_exceptions=True))
    await until(lambda: len(conn.views) == 4)
    conn.set("j1", JobStatus.IN_PROGRESS)
    conn.end(0, "done")
    await until(lambda: bars and bars[0].running == 1 and bars[0].queued == 2)
    conn.end(1, error="boom")
    conn.end(2, "x")
    conn.end(3, "y")
    await outputs
    (shown,) = bars
    assert (shown.completed, shown.failed) == (3, 1)
    assert "3 completed" in terminal.getvalue() and "1 failed" in terminal.getvalue()


async def test_a_call_queued_for_long_shows_one_line_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "WAIT_LINE_AFTER_S", 0.0)
    monkeypatch.setenv("FLASHPOINT_PROGRESS", "")
    terminal = Terminal()
    conn = ScriptedConnection()
    view = await conn.submit("e", {}, {})
    async with progress.wait_line(conn, view.id, stream=terminal):  # type: ignore[arg-type]
        await until(lambda: "waiting for a GPU: NVIDIA H200 busy" in terminal.getvalue())
        conn.set(view.id, JobStatus.COMPLETED, "out")
    shown = terminal.getvalue()
    line = shown.split("\x1b[33m")[1].split("\x1b[0m")[0]
    assert line.startswith("waiting in the queue:") and "\n" not in line  # one line, cut to the width
    assert shown.endswith("\x1b[2K")  # and erased once the job left the queue


async def test_no_line_where_nobody_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "WAIT_LINE_AFTER_S", 0.0)
    monkeypatch.setenv("FLASHPOINT_PROGRESS", "")
    conn = ScriptedConnection()
    view = await conn.submit("e", {}, {})
    asked: list[str] = []
    real_get = conn.get

    async def get(job_id: str) -> JobView:
        asked.append(job_id)
        return await real_get(job_id)

    conn.get = get  # type: ignore[method-assign]
    piped = io.StringIO()
    async with progress.wait_line(conn, view.id, stream=piped):  # type: ignore[arg-type]
        for _ in range(50):  # loop turns in which a line would have asked about the job (it asks at once)
            await asyncio.sleep(0)
    assert asked == [] and piped.getvalue() == ""
