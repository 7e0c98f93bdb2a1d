"""The seam between handles and a control plane: the Connection protocol.

The embedded server (``embedded.py``) and the HTTP client (``client.py``) implement it; which one a handle gets is
``default_connection.connect()``'s choice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from flashpoint.jobs import JobView
from flashpoint.spec import EndpointSpec, WorkerTarget

if TYPE_CHECKING:
    from flashpoint.explain import Explanation


class Connection(Protocol):
    """What a handle needs from a control plane; the embedded plane and the HTTP client both provide it.

    ``extra`` holds a job request's keys beside its input, as in Runpod's ``{"input": ..., "webhook": url}``: Runpod's
    own (``webhook``, ``policy``) and flashpoint's metadata under ``flashpoint`` (``binary_ok``, ``init``, ``target``).
    """

    #: True when ``register`` hands the plane the endpoint's code (an embedded plane); False when the plane runs its
    #: own (a server, which ``register`` only asks whether it serves the endpoint)
    hosts_code: bool

    async def register(self, spec: EndpointSpec, target: WorkerTarget) -> None: ...
    async def submit(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView: ...
    async def call(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView: ...
    async def get(self, job_id: str) -> JobView: ...
    async def wait(self, job_id: str, timeout: float | None) -> JobView: ...
    async def cancel(self, job_id: str) -> JobView: ...
    async def retry(self, job_id: str) -> JobView:
        """Put a FAILED or TIMED_OUT job back in its queue, with its id."""
        ...

    async def explain_job(self, job_id: str) -> Explanation: ...
    async def explain_endpoint(self, name: str) -> Explanation: ...
    # declared with `def`: implementations are async generators (`async def ...: yield chunk`)
    def stream(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        """Submit a job to a generator endpoint and yield its decoded chunks; JobFailedError if it fails."""
        ...


@runtime_checkable
class ServerConnection(Connection, Protocol):
    """A connection to a flashpoint server (``FLASHPOINT_URL``), which ``Endpoint(id=...)`` clients need."""

    async def check_endpoint(self, name: str) -> None: ...
    async def route(self, endpoint: str, method: str, path: str, data: Any, timeout: float) -> Any:
        """Call an HTTP route of a served endpoint, ``METHOD {server}/{endpoint}{path}``; its parsed JSON answer."""
        ...
