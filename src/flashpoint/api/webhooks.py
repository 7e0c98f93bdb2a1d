"""Webhooks: on a terminal state, POST the job's /status body to its ``webhook`` URL (two retries, 10 s apart)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from flashpoint.jobs import JobView
from flashpoint.scheduler.loop import ControlPlane

log = logging.getLogger("flashpoint.webhooks")


class Webhooks:
    """Listens to the plane; each delivery is a task, so a slow receiver never holds the plane up."""

    def __init__(self, plane: ControlPlane, *, attempts: int = 3, retry_delay_s: float = 10.0, timeout_s: float = 10.0):
        self.plane = plane
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        plane.listeners.append(self.on_terminal)

    def on_terminal(self, view: JobView) -> None:
        if view.webhook is None:
            return
        task = asyncio.get_running_loop().create_task(self._deliver(view.webhook, view.to_json()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, url: str, body: dict[str, Any]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self._client.post(url, json=body)
                if response.status_code < 300:
                    return
                problem = f"answered {response.status_code}"
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            log.warning("webhook for job %s to %s %s (attempt %d of %d)", body["id"], url, problem, attempt,
                        self.attempts)  # fmt: skip
            if attempt < self.attempts:
                await asyncio.sleep(self.retry_delay_s)

    async def close(self) -> None:
        """Finish deliveries in flight for up to one timeout, then drop the rest."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.timeout_s)
            for task in self._tasks:
                task.cancel()
        if self._client is not None:
            await self._client.aclose()
