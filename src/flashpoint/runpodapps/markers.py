"""Route and lifecycle markers for ``@app.api`` classes (mirrors ``runpod/apps/markers.py`` of ``runpod==2.0.0rc2``).

The markers stamp metadata on methods and return them unchanged; the ``ApiHandle`` collects them when the class is
decorated::

    @app.api(name="inference", gpu=GpuType.NVIDIA_GEFORCE_RTX_4090)
    class Inference:
        @init
        def setup(self):
            self.model = load_model()

        @post("/generate")
        async def generate(self, body: dict):
            return {"text": self.model.run(body["prompt"])}

A bad method or a path the worker runtime keeps for itself fails when the marker is made (``ValueError``, rc2's).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "INIT_ATTR",
    "RESERVED_PATHS",
    "ROUTE_ATTR",
    "delete",
    "get",
    "init",
    "is_init",
    "patch",
    "post",
    "put",
    "route_of",
    "validate_route",
]

F = TypeVar("F", bound=Callable[..., Any])

ROUTE_ATTR = "__runpod_route__"
INIT_ATTR = "__runpod_init__"

_VALID_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH"})

#: paths used by the worker runtime; user routes must not collide
RESERVED_PATHS = frozenset({"/execute", "/ping", "/_runpod/sync"})


def validate_route(method: str, path: str) -> None:
    """raise ``ValueError`` unless ``method`` is an HTTP verb rc2 serves and ``path`` is absolute and not reserved."""
    if not isinstance(method, str) or method not in _VALID_METHODS:
        raise ValueError(f"method must be one of {sorted(_VALID_METHODS)}")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"path must start with '/', got: {path!r}")
    if path in RESERVED_PATHS:
        reserved = ", ".join(sorted(RESERVED_PATHS))
        raise ValueError(f"path {path!r} is reserved by the worker runtime (reserved: {reserved})")


def _route_marker(method: str, path: str) -> Callable[[F], F]:
    validate_route(method, path)

    def marker(fn: F) -> F:
        setattr(fn, ROUTE_ATTR, (method, path))
        return fn

    return marker


def get(path: str) -> Callable[[F], F]:
    """mark a method as a GET route."""
    return _route_marker("GET", path)


def post(path: str) -> Callable[[F], F]:
    """mark a method as a POST route."""
    return _route_marker("POST", path)


def put(path: str) -> Callable[[F], F]:
    """mark a method as a PUT route."""
    return _route_marker("PUT", path)


def delete(path: str) -> Callable[[F], F]:
    """mark a method as a DELETE route."""
    return _route_marker("DELETE", path)


def patch(path: str) -> Callable[[F], F]:
    """mark a method as a PATCH route."""
    return _route_marker("PATCH", path)


def init(fn: F) -> F:
    """mark a method (or function) as a worker-startup hook.

    on an @app.api class, the marked method runs after instantiation and before the worker reports healthy. on a
    queue/task handle, use `@handle.init` instead.
    """
    setattr(fn, INIT_ATTR, True)
    return fn


def route_of(fn: Any) -> tuple[str, str] | None:
    """return (method, path) if fn is marked as a route."""
    route: tuple[str, str] | None = getattr(fn, ROUTE_ATTR, None)
    return route


def is_init(fn: Any) -> bool:
    """true if fn is marked as an init hook."""
    return getattr(fn, INIT_ATTR, False) is True
