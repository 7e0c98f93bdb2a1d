"""Job traces a replay reads: the Alibaba ``openb`` pod lists, and flashpoint's own CSV format.

Each file is recognised by its header row, never by its name:

- an **openb pod list** (``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
  deletion_time,scheduled_time]``, ../shared/traces/openb/README.md): a row is a task of ``num_gpu`` devices of any
  model in ``gpu_spec`` (``|``-separated, in the order written, repeats dropped; empty: any model), of the priority
  class its ``qos`` stands for (``LS`` and ``Guaranteed`` high, ``Burstable`` normal, ``BE`` low; none: normal),
  arriving at ``creation_time`` and running ``deletion_time - scheduled_time`` seconds (none when it was never
  scheduled). ``gpu_milli`` below 1000 (a share of one GPU: flashpoint has no fractional GPUs) counts as one whole
  GPU (``Trace.fractional_as_whole``), or leaves the task out with ``skip_fractional``. A task of no GPU is left out
  (``Trace.cpu_only``): the replay places GPUs only.
- **flashpoint's trace format**: a CSV file whose header starts ``arrival_s,duration_s,gpus``, then optionally
  ``candidates``, ``class`` and ``app``, one task a row::

      arrival_s,duration_s,gpus,candidates,class,app
      0,3600,8,NVIDIA H200|NVIDIA B200,high,training
      12.5,60,1,,low,

  ``arrival_s`` seconds from the start; ``duration_s`` how long it holds its devices once placed (empty: unknown);
  ``gpus`` devices on one node (at least 1); ``candidates`` model names, ``|``-separated, in the order to try them
  (a catalog name, or a model name as the fleet file writes it; empty: any model); ``class`` a priority class
  (``high``, ``normal`` (the default), ``low``, or an openb qos name); ``app`` the app it is counted under (empty:
  none).

``priorities=False`` makes every task's class ``normal``. Pure but for reading the file.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from flashpoint.errors import ConfigError

__all__ = ["OPENB_POD_HEADER", "OWN_HEADER", "QOS_CLASSES", "Task", "Trace", "parse_trace", "read_trace"]

#: the columns every openb pod list starts with (multigpu50 has only these)
OPENB_POD_HEADER = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
#: the columns flashpoint's own trace format starts with
OWN_HEADER = ("arrival_s", "duration_s", "gpus")
#: openb's Kubernetes-style qos classes as priority classes
QOS_CLASSES = {"LS": "high", "Guaranteed": "high", "Burstable": "normal", "BE": "low"}


@dataclass(frozen=True, slots=True)
class Task:
    """One request of a trace: ``gpus`` devices of one node, of a model in ``candidates`` (model names in the order to
    try them; empty: any model), in priority class ``priority``."""

    name: str
    gpus: int
    candidates: tuple[str, ...]
    priority: str
    #: seconds from the trace's start (None: the trace has no times)
    arrival_s: float | None
    #: how long it holds its devices once placed (None: never scheduled, or the trace has no times)
    duration_s: float | None
    app: str | None = None
    #: asked a share of one GPU, counted as a whole one
    fractional: bool = False


@dataclass(frozen=True, slots=True)
class Trace:
    """The GPU tasks of a trace in its order, and what was left out or counted whole."""

    #: "openb" or "flashpoint"
    format: str
    tasks: tuple[Task, ...]
    #: tasks of no GPU, left out
    cpu_only: int = 0
    #: fractional tasks counted as one whole GPU
    fractional_as_whole: int = 0
    #: fractional tasks left out (``skip_fractional``)
    fractional_skipped: int = 0

    @property
    def timed(self) -> bool:
        """Whether its tasks have durations (a timed replay needs some)."""
        return any(t.duration_s is not None for t in self.tasks)


def read_trace(path: str | Path, *, skip_fractional: bool = False, priorities: bool = True) -> Trace:
    """The trace in the file at ``path``, recognised by its header row (this module's docstring).

    Raises:
        ConfigError: the file cannot be read, its header is neither format's, or a row is malformed (with its line).
    """
    file = Path(path).expanduser()
    try:
        with file.open(newline="", encoding="utf-8") as stream:
            return parse_trace(stream, skip_fractional=skip_fractional, priorities=priorities, where=str(file))
    except OSError as exc:
        raise ConfigError(f"cannot read the trace {file}: {exc.strerror or exc}") from None


def parse_trace(
    lines: Iterable[str], *, skip_fractional: bool = False, priorities: bool = True, where: str = "the trace"
) -> Trace:
    """The trace in ``lines`` (a CSV text, header first); ``where`` names it in errors."""
    rows = csv.reader(lines)
    header = tuple(cell.strip() for cell in next(rows, []))
    if header[: len(OPENB_POD_HEADER)] == OPENB_POD_HEADER:
        return _openb(header, rows, skip_fractional=skip_fractional, priorities=priorities, where=where)
    if header[: len(OWN_HEADER)] == OWN_HEADER:
        return _own(header, rows, priorities=priorities, where=where)
    raise ConfigError(
        f"{where}: not a trace this replay reads: its header is {','.join(header) or '(empty)'}; expected an openb "
        f"pod list ({','.join(OPENB_POD_HEADER)},...) or flashpoint's format ({','.join(OWN_HEADER)},candidates,"
        "class,app)"
    )


def _records(header: Sequence[str], rows: Iterator[list[str]], where: str) -> Iterator[tuple[int, dict[str, str]]]:
    for line, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            raise ConfigError(f"{where}, line {line}: {len(row)} fields, the header names {len(header)}")
        yield line, {key: (row[i].strip() if i < len(row) else "") for i, key in enumerate(header)}


def _number(value: str, what: str, where: str, line: int) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{where}, line {line}: {what} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{where}, line {line}: {what} must be a number >= 0, got {value!r}")
    return number


def _models(text: str) -> tuple[str, ...]:
    """``a|b|a`` as ("a", "b"): the order written, repeats dropped."""
    return tuple(dict.fromkeys(m.strip() for m in text.split("|") if m.strip()))


def _class(value: str, priorities: bool) -> str:
    if not priorities or not value:
        return "normal"
    return QOS_CLASSES.get(value, value)


def _openb(
    header: Sequence[str], rows: Iterator[list[str]], *, skip_fractional: bool, priorities: bool, where: str
) -> Trace:
    tasks: list[Task] = []
    cpu_only = whole = skipped = 0
    for line, rec in _records(header, rows, where):
        gpus = int(_number(rec["num_gpu"], "num_gpu", where, line))
        if gpus == 0:
            cpu_only += 1
            continue
        milli = _number(rec["gpu_milli"] or "1000", "gpu_milli", where, line)
        fractional = milli < 1000
        if fractional and skip_fractional:
            skipped += 1
            continue
        whole += fractional
        arrival = rec.get("creation_time", "")
        scheduled, deleted = rec.get("scheduled_time", ""), rec.get("deletion_time", "")
        duration = None
        if scheduled and deleted:
            duration = max(0.0, _number(deleted, "deletion_time", where, line) - _number(scheduled, "", where, line))
        tasks.append(
            Task(
                name=rec["name"],
                gpus=gpus,
                candidates=_models(rec.get("gpu_spec", "")),
                priority=_class(rec.get("qos", ""), priorities),
                arrival_s=_number(arrival, "creation_time", where, line) if arrival else None,
                duration_s=duration,
                fractional=fractional,
            )
        )
    return Trace("openb", tuple(tasks), cpu_only, whole, skipped)


def _own(header: Sequence[str], rows: Iterator[list[str]], *, priorities: bool, where: str) -> Trace:
    tasks: list[Task] = []
    for line, rec in _records(header, rows, where):
        gpus = _number(rec["gpus"], "gpus", where, line)
        if gpus < 1 or gpus != int(gpus):
            raise ConfigError(f"{where}, line {line}: gpus must be a whole number >= 1, got {rec['gpus']!r}")
        duration = rec["duration_s"]
        tasks.append(
            Task(
                name=f"task-{len(tasks)}",
                gpus=int(gpus),
                candidates=_models(rec.get("candidates", "")),
                priority=_class(rec.get("class", ""), priorities),
                arrival_s=_number(rec["arrival_s"], "arrival_s", where, line),
                duration_s=_number(duration, "duration_s", where, line) if duration else None,
                app=rec.get("app") or None,
            )
        )
    return Trace("flashpoint", tuple(tasks))
