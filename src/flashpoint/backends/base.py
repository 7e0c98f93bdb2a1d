"""The Backend protocol: what the control plane needs to start and stop worker processes on a fleet."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from flashpoint.scheduler.inventory import Device

#: called with (worker_id, stream name "stdout"/"stderr", line without newline)
LineCallback = Callable[[str, str, str], None]
#: called once with (worker_id, exit code) when the worker process is gone
ExitCallback = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything needed to start one worker: command, environment, and the devices it was placed on."""

    worker_id: str
    endpoint: str
    argv: Sequence[str]
    env: Mapping[str, str]
    devices: tuple[Device, ...]
    cwd: str | None = None


class Backend(Protocol):
    """Starts and stops workers; reports their output and their exit. Core never names a concrete backend."""

    name: str

    def devices(self) -> list[Device]:
        """The fleet this backend places workers on, in a stable order."""
        ...

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> None:
        """Start the worker; raise BackendError if it cannot be started at all."""
        ...

    async def stop(self, worker_id: str, grace_s: float) -> None:
        """Ask the worker to exit (SIGTERM), and force it (SIGKILL) after ``grace_s``."""
        ...

    async def close(self) -> None:
        """Stop every worker this backend started and wait for them."""
        ...
