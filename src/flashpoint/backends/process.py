"""Worker processes on this machine: start one, pump its output lines, stop it. Shared by the local backend and the
Ray backend's actors (which run the same worker process on their node)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Collection, Mapping, Sequence

from flashpoint.errors import BackendError

log = logging.getLogger("flashpoint.backends")

#: called with (channel "stdout" or "stderr", line without its newline)
OnLine = Callable[[str, str], None]


def free_port(host: str, taken: Collection[int] = ()) -> int:
    """A TCP port free on ``host`` now, and not one of ``taken`` (ports handed to workers not yet bound to them).

    The kernel picks it (bind to port 0); the socket is closed before the worker binds, so another process may take
    the port in between: the worker then fails to start and the next start gets another one.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in taken:
            return port
    raise BackendError(f"no free TCP port on {host} after 100 tries")


async def spawn(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> asyncio.subprocess.Process:
    """Start ``argv`` in its own session with piped output; raise BackendError if it cannot start at all."""
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # its own session: a Ctrl-C in the caller's terminal reaches the control plane, which stops workers
            start_new_session=True,
        )
    except OSError as exc:
        raise BackendError(f"cannot start {' '.join(argv)}: {exc}") from exc


async def watch(proc: asyncio.subprocess.Process, on_line: OnLine) -> int:
    """Pass every output line to ``on_line`` until the process exits; return its exit code."""

    async def pump(stream: asyncio.StreamReader | None, name: str) -> None:
        if stream is None:
            return
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line longer than the stream limit: take what is there
                raw = await stream.read(65536)
            if not raw:
                return
            on_line(name, raw.decode(errors="replace").rstrip("\n"))

    pumps = asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
    code = await proc.wait()
    # A worker's own children (Runpod's heartbeat process, say) share its pipes and would hold them open: end the
    # worker's whole process group, then read what is left for a moment.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        await asyncio.wait_for(pumps, 2.0)
    except asyncio.TimeoutError:
        pumps.cancel()
    return code


async def terminate(proc: asyncio.subprocess.Process, grace_s: float, name: str) -> None:
    """SIGTERM, then SIGKILL after ``grace_s`` if the process is still there."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace_s)
    except asyncio.TimeoutError:
        log.warning("worker %s did not stop within %.1fs; killing it", name, grace_s)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
