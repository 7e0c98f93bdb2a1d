"""The route proxy's pure parts: route templates as patterns, and the route label of a request (the metrics')."""

from __future__ import annotations

import pytest

from flashpoint.api.routeproxy import OTHER, route_matcher, route_pattern
from flashpoint.spec import RouteSpec

ROUTES = (
    RouteSpec("GET", "/echo", "echo"),
    RouteSpec("POST", "/items/{item_id}", "item"),
    RouteSpec("GET", "/files/{rest:path}", "files"),
)


@pytest.mark.parametrize(
    ("template", "path", "matches"),
    [
        ("/echo", "/echo", True),
        ("/echo", "/echo/", False),
        ("/items/{item_id}", "/items/7", True),
        ("/items/{item_id:int}", "/items/7", True),
        ("/items/{item_id}", "/items/7/more", False),
        ("/files/{rest:path}", "/files/a/b/c", True),
        ("/a.b", "/aXb", False),  # the rest of a template is literal
    ],
)
def test_route_templates_match_paths(template: str, path: str, matches: bool) -> None:
    assert bool(route_pattern(template).fullmatch(path)) is matches


def test_the_route_label_is_the_first_declared_template_a_request_matches_else_other() -> None:
    match = route_matcher(ROUTES)
    assert match("POST", "/items/9") == "/items/{item_id}"
    assert match("GET", "/items/9") == OTHER  # declared for POST only
    assert match("GET", "/files/x/y") == "/files/{rest:path}"
    assert match("GET", "/unknown") == OTHER
