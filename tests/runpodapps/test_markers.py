"""Route and lifecycle markers (rc2's ``runpod/apps/markers.py``): they stamp and return the function unchanged; bad
methods and reserved paths fail when the marker is made."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flashpoint.runpodapps import delete, get, init, patch, post, put
from flashpoint.runpodapps.markers import RESERVED_PATHS, is_init, route_of, validate_route


@pytest.mark.parametrize(
    ("marker", "method"), [(get, "GET"), (post, "POST"), (put, "PUT"), (delete, "DELETE"), (patch, "PATCH")]
)
def test_markers_stamp_and_return_the_function(marker: Callable[[str], Any], method: str) -> None:
    def handler(self: Any) -> None: ...

    assert marker("/items/{id}")(handler) is handler
    assert route_of(handler) == (method, "/items/{id}")
    assert not is_init(handler)


def test_init_marks() -> None:
    def setup(self: Any) -> None: ...

    assert init(setup) is setup
    assert is_init(setup)
    assert route_of(setup) is None


@pytest.mark.parametrize(
    ("method", "path", "message"),
    [
        ("get", "/x", "method must be one of ['DELETE', 'GET', 'PATCH', 'POST', 'PUT']"),
        ("HEAD", "/x", "method must be one of ['DELETE', 'GET', 'PATCH', 'POST', 'PUT']"),
        (None, "/x", "method must be one of ['DELETE', 'GET', 'PATCH', 'POST', 'PUT']"),
        ("GET", "x", "path must start with '/', got: 'x'"),
        ("GET", "", "path must start with '/', got: ''"),
        ("GET", None, "path must start with '/', got: None"),
        (
            "POST",
            "/execute",
            "path '/execute' is reserved by the worker runtime (reserved: /_runpod/sync, /execute, /ping)",
        ),
        ("GET", "/ping", "path '/ping' is reserved by the worker runtime (reserved: /_runpod/sync, /execute, /ping)"),
        (
            "POST",
            "/_runpod/sync",
            "path '/_runpod/sync' is reserved by the worker runtime (reserved: /_runpod/sync, /execute, /ping)",
        ),
    ],
)
def test_bad_routes(method: Any, path: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        validate_route(method, path)
    assert str(raised.value) == message


@pytest.mark.parametrize("path", ["x", "/ping", "/execute"])
def test_a_marker_checks_when_made(path: str) -> None:
    with pytest.raises(ValueError):
        post(path)


def test_reserved_paths_are_exact() -> None:
    assert RESERVED_PATHS == {"/execute", "/ping", "/_runpod/sync"}
    validate_route("GET", "/ping/me")
    validate_route("GET", "/")
