"""``fn.map(xs)`` and ``fn.starmap(pairs)``: one job per item, outputs in order (or as they finish), with a progress
bar on a terminal.

A ``MapCall`` is both an async iterator and awaitable: ``async for out in fn.map(xs)`` yields each output as it becomes
available in order (``ordered=False``: as each job finishes), and ``await fn.map(xs)`` returns the list. Items are
submitted in order, at most ``window`` jobs outstanding (submitted and not yet handed back), so an iterable of a million
items neither floods the queue's caps nor holds a million long-polls open; the queue still sees up to ``window`` jobs
at once for its scaler. A failed job raises its ``JobFailedError`` where its output would come (the jobs still
outstanding are cancelled), unless ``return_exceptions=True``, which hands the error back in its place.
Stopping early (``break``, an exception in the loop's body) cancels the jobs still outstanding: nobody will read them.

The bar (``progress.MapBar``) counts completed and failed jobs as they end; running and queued ones are read every
second from the outstanding jobs' statuses, oldest first and at most ``progress.BAR_POLLS`` per refresh, stopping at the
first one still queued (jobs of one endpoint leave its queue in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Iterator
from typing import Any, Generic, Literal, TypeVar, overload

from flashpoint.errors import JobFailedError
from flashpoint.jobs import JobStatus, JobView
from flashpoint.sdk import progress
from flashpoint.sdk.jobhandle import JobHandle, job_failure, job_result

log = logging.getLogger("flashpoint")

#: what a map yields for each job: its output (with ``return_exceptions=True``, or its ``JobFailedError``)
T_co = TypeVar("T_co", covariant=True)
#: one job's output
R = TypeVar("R")

#: jobs submitted and not yet handed back, at most (the HTTP client keeps 256 connections: room for the rest)
WINDOW = 128

Submit = Callable[[tuple[Any, ...], dict[str, Any]], Awaitable[JobHandle[Any]]]
#: the calls of a map: positional and keyword arguments of each job
Calls = Iterable[tuple[tuple[Any, ...], dict[str, Any]]]


class MapCall(Generic[T_co]):
    """The jobs of one ``map``/``starmap`` (see the module's docstring), typed by what each yields: the function's
    output (``MapCall[str]``), or that or its ``JobFailedError`` with ``return_exceptions=True``."""

    def __init__(
        self,
        name: str,
        submit: Submit,
        calls: Calls,
        *,
        total: int | None,
        ordered: bool = True,
        progress_bar: bool | None = None,
        return_exceptions: bool = False,
        window: int = WINDOW,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.name = name
        self._submit = submit
        self._calls = calls
        self._total = total
        self.ordered = ordered
        #: None: drawn when standard error is a terminal
        self.progress_bar = progress.interactive() if progress_bar is None else progress_bar and progress.interactive()
        self.return_exceptions = return_exceptions
        self.window = window
        self._used = False

    def __aiter__(self) -> AsyncIterator[T_co]:
        if self._used:
            raise RuntimeError("a map call runs once: call fn.map(...) again to run the jobs again")
        self._used = True
        return self._outputs()

    def __await__(self) -> Generator[Any, None, list[T_co]]:
        return self._collect().__await__()

    async def _collect(self) -> list[T_co]:
        return [output async for output in self]

    async def _outputs(self) -> AsyncIterator[T_co]:
        run = _Run(self)
        try:
            if self.progress_bar:
                with progress.MapBar(self.name, self._total) as bar:
                    run.bar = bar
                    refresher = asyncio.ensure_future(run.refresh_counts())
                    try:
                        async for output in run.outputs():
                            yield output
                    finally:
                        refresher.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await refresher
            else:
                async for output in run.outputs():
                    yield output
        finally:
            await run.cancel_outstanding()


class _Run:
    """One pass over the items: submission within the window, the waits, and the counts the bar shows."""

    def __init__(self, call: MapCall[Any]) -> None:
        self.call = call
        self.items: Iterator[tuple[tuple[Any, ...], dict[str, Any]]] = iter(call._calls)
        self.exhausted = False
        self.submitted = 0
        #: submitted jobs not yet handed back, by submission index
        self.handles: dict[int, JobHandle[Any]] = {}
        self.waits: dict[int, asyncio.Task[JobView]] = {}
        #: indexes whose job ended, in the order they ended (unordered output reads it)
        self.ended: asyncio.Queue[int] = asyncio.Queue()
        self.bar: progress.MapBar | None = None

    async def fill(self) -> None:
        """Submit items until the window is full or they run out."""
        while not self.exhausted and len(self.handles) < self.call.window:
            try:
                args, kwargs = next(self.items)
            except StopIteration:
                self.exhausted = True
                if self.bar is not None:
                    self.bar.total(self.submitted)
                return
            index = self.submitted
            handle = await self.call._submit(args, kwargs)
            self.submitted += 1
            self.handles[index] = handle
            wait = asyncio.ensure_future(_ended_view(handle))
            wait.add_done_callback(functools.partial(self._ended, index))
            self.waits[index] = wait
            if self.bar is not None:
                self.bar.queued += 1
                self.bar.update()

    def _ended(self, index: int, task: asyncio.Task[JobView]) -> None:
        self.ended.put_nowait(index)
        bar = self.bar
        if bar is None or task.cancelled():
            return
        view = None if task.exception() is not None else task.result()
        if view is not None and view.status is JobStatus.COMPLETED:
            bar.completed += 1
        else:
            bar.failed += 1
        bar.update()

    async def outputs(self) -> AsyncIterator[Any]:
        await self.fill()
        next_index = 0
        while self.handles:
            if self.call.ordered:
                index = next_index
                await asyncio.wait({self.waits[index]})
                next_index += 1
            else:
                index = await self.ended.get()
            wait = self.waits.pop(index)
            self.handles.pop(index)
            view = wait.result()  # a wait that failed (the connection) raises here
            await self.fill()
            if view.status is JobStatus.COMPLETED:
                yield job_result(view)
            elif self.call.return_exceptions:
                yield job_failure(view)
            else:
                raise job_failure(view)

    async def refresh_counts(self) -> None:
        """Every ``BAR_EVERY_S``: how many outstanding jobs run, how many wait (see the module's docstring)."""
        bar = self.bar
        assert bar is not None
        while True:
            await asyncio.sleep(progress.BAR_EVERY_S)  # the bar's refresh period
            running = 0
            try:
                for index in sorted(self.handles)[: progress.BAR_POLLS]:
                    if self.waits[index].done():
                        continue
                    status = await self.handles[index].status()
                    if status == JobStatus.IN_QUEUE.value:
                        break
                    if status == JobStatus.IN_PROGRESS.value:
                        running += 1
            except (KeyError, JobFailedError):  # handed back meanwhile
                pass
            except Exception as exc:  # the bar is a courtesy: it stops counting, the jobs go on
                log.debug("the map's progress stopped counting: %r", exc)
                return
            outstanding = sum(1 for wait in self.waits.values() if not wait.done())
            bar.running, bar.queued = running, max(0, outstanding - running)
            bar.update()

    async def cancel_outstanding(self) -> None:
        """Cancel the jobs nobody will read (the loop stopped early, or a job failed), and stop waiting for them."""
        unfinished = [index for index, wait in self.waits.items() if not wait.done()]
        for wait in self.waits.values():
            wait.cancel()
        for index in unfinished:
            with contextlib.suppress(Exception):  # gone already, or the connection is: nothing more to do
                await self.handles[index].cancel()
        await asyncio.gather(*self.waits.values(), return_exceptions=True)
        self.handles.clear()
        self.waits.clear()


class MapMethods(Generic[R]):
    """``map`` and ``starmap`` for a callable endpoint handle whose ``run(*args, **kwargs)`` submits one job with
    output ``R``.

    The items are typed ``Any``: one iterable per parameter (``map``) or one tuple per call (``starmap``) is more than
    a ``ParamSpec`` can say; the outputs are typed.
    """

    def run(self, *args: Any, **kwargs: Any) -> Awaitable[JobHandle[R]]:
        raise NotImplementedError

    def _map_label(self) -> str:
        """The bar's label: the endpoint's name (and method)."""
        raise NotImplementedError

    @overload
    def map(
        self,
        *iterables: Iterable[Any],
        ordered: bool = True,
        progress: bool | None = None,
        return_exceptions: Literal[False] = False,
        window: int = WINDOW,
    ) -> MapCall[R]: ...
    @overload
    def map(
        self,
        *iterables: Iterable[Any],
        ordered: bool = True,
        progress: bool | None = None,
        return_exceptions: bool = False,
        window: int = WINDOW,
    ) -> MapCall[R | JobFailedError]: ...
    def map(
        self,
        *iterables: Iterable[Any],
        ordered: bool = True,
        progress: bool | None = None,
        return_exceptions: bool = False,
        window: int = WINDOW,
    ) -> MapCall[R | JobFailedError]:
        """One job per item (``zip`` of ``iterables``: one positional argument each); ``await`` it for the list of
        outputs, or ``async for`` them: in order, or as they finish with ``ordered=False``. A progress bar is drawn
        on a terminal unless ``progress=False``. A failed job raises its ``JobFailedError`` (the rest are
        cancelled) unless ``return_exceptions=True``. At most ``window`` jobs are outstanding at once."""
        calls, total = map_calls(iterables)
        return self._map(calls, total, ordered, progress, return_exceptions, window)

    @overload
    def starmap(
        self,
        iterable: Iterable[Any],
        ordered: bool = True,
        progress: bool | None = None,
        return_exceptions: Literal[False] = False,
        window: int = WINDOW,
    ) -> MapCall[R]: ...
    @overload
    def starmap(
        self,
        iterable: Iterable[Any],
        ordered: bool = True,
        progress: bool | None = None,
        return_exceptions: bool = False,
        window: int = WINDOW,
    ) -> MapCall[R | JobFailedError]: ...
    def starmap(
        self,
        iterable: Iterable[Any],
        ordered: bool = True,
        progress: bool | None = None,
        return_exceptions: bool = False,
        window: int = WINDOW,
    ) -> MapCall[R | JobFailedError]:
        """As ``map``, each item a tuple of positional arguments (or a dict of keyword arguments)."""
        calls, total = starmap_calls(iterable)
        return self._map(calls, total, ordered, progress, return_exceptions, window)

    def _map(
        self,
        calls: Calls,
        total: int | None,
        ordered: bool,
        progress: bool | None,
        return_exceptions: bool,
        window: int,
    ) -> MapCall[R | JobFailedError]:
        async def submit(args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobHandle[R]:
            return await self.run(*args, **kwargs)

        return MapCall(
            self._map_label(),
            submit,
            calls,
            total=total,
            ordered=ordered,
            progress_bar=progress,
            return_exceptions=return_exceptions,
            window=window,
        )


async def _ended_view(handle: JobHandle[Any]) -> JobView:
    await handle.wait()
    return handle.view


def map_calls(
    iterables: tuple[Iterable[Any], ...],
) -> tuple[Calls, int | None]:
    """``map``'s items: one call per element of ``zip(*iterables)``, each element a positional argument; the count
    when every iterable knows its length."""
    if not iterables:
        raise TypeError("map() needs at least one iterable, e.g. fn.map([1, 2, 3])")
    calls: Calls = ((tuple(args), {}) for args in zip(*iterables, strict=False))
    return calls, _length(iterables)


def starmap_calls(
    iterable: Iterable[Any],
) -> tuple[Calls, int | None]:
    """``starmap``'s items: each element a tuple of positional arguments (a dict: keyword arguments)."""

    def calls() -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        for element in iterable:
            if isinstance(element, dict):
                yield (), dict(element)
            elif isinstance(element, tuple | list):
                yield tuple(element), {}
            else:
                raise TypeError(
                    f"starmap() takes an iterable of argument tuples (or dicts of keyword arguments), got an element "
                    f"{element!r}; use map() for one argument per job"
                )

    return calls(), _length((iterable,))


def _length(iterables: tuple[Iterable[Any], ...]) -> int | None:
    lengths = []
    for iterable in iterables:
        try:
            lengths.append(len(iterable))  # type: ignore[arg-type]
        except TypeError:
            return None
    return min(lengths)
