"""How a worker serves an rc2 resource (decision 0108): an ``@app.api`` class or ASGI factory as the ASGI app of a route
worker, and a queue or task function's ``@fn.init`` hook before the worker takes jobs.

- ``ApiEndpoint``: the flashpoint handle of an api resource (what discovery registers): its ``EndpointSpec`` (kind
  ``routes``) and how a worker loads it (``worker_target``: the module attribute holding the rc2 handle).
- the route worker serves it with ``worker.routeapp.rc2_app`` (FastAPI is the worker's, not the SDK's).
- ``worker_init(handle)``: a queue or task function's ``@fn.init`` hook, run once as the worker loads its code.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

from flashpoint.errors import InvalidEndpointError
from flashpoint.spec import EndpointSpec, RouteSpec, WorkerTarget

__all__ = ["ApiEndpoint", "run_hook", "worker_init"]


def run_hook(hook: Any, *args: Any) -> None:
    """Call a startup hook, to its end: a coroutine function is run on an event loop of its own."""
    result = hook(*args)
    if inspect.isawaitable(result):
        asyncio.run(_await(result))


async def _await(awaitable: Any) -> None:
    await awaitable


def worker_init(handle: Any) -> None:
    """Run a queue or task handle's ``@fn.init`` hook (none: nothing)."""
    hook = getattr(handle, "_init_fn", None)
    if hook is not None:
        run_hook(hook)


def _module_attr(handle: Any) -> str | None:
    """``module:attr`` of the module-level name that holds ``handle``, where a worker's import finds it again."""
    target = handle.__wrapped__
    name = getattr(target, "__module__", None)
    if not name or name == "__main__" or "<locals>" in getattr(target, "__qualname__", ""):
        return None
    module = sys.modules.get(name)
    if module is None:
        return None
    for attr, value in vars(module).items():
        if value is handle and not attr.startswith("__"):
            return f"{name}:{attr}"
    return None


class ApiEndpoint:
    """An ``@app.api`` resource as flashpoint serves it: a route endpoint whose workers serve the class's routes (or
    the factory's app) on ``$PORT``; the server proxies ``/{app.env.name}/...`` to them."""

    def __init__(self, spec: EndpointSpec, handle: Any) -> None:
        routes = tuple(RouteSpec(r.method, r.path, r.handler_name) for r in handle.spec.routes)
        self.spec = spec if spec.routes == routes else _with_routes(spec, routes)
        self.rc2_handle = handle
        self.__wrapped__ = handle.__wrapped__

    def worker_target(self) -> WorkerTarget:
        """The module attribute holding the rc2 handle (the worker's import declares it again).

        Raises:
            InvalidEndpointError: the class or factory is not at the top level of an importable module.
        """
        path = _module_attr(self.rc2_handle)
        if path is None:
            raise InvalidEndpointError(
                f"api resource {self.spec.name!r}: declare its class or function at the top level of a module "
                "(a worker imports it from there), not in a function or in __main__"
            )
        return WorkerTarget(import_path=path)

    def __repr__(self) -> str:
        return f"<Endpoint {self.spec.key!r} api {self.__wrapped__.__name__} gpu={self.spec.describe_gpu()}>"


def _with_routes(spec: EndpointSpec, routes: tuple[RouteSpec, ...]) -> EndpointSpec:
    import dataclasses

    return dataclasses.replace(spec, routes=routes)
