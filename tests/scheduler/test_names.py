"""Which endpoint a caller means (``scheduler/names.py``), by table: an id first, else a bare name one endpoint alone
has; several apps' endpoints of one bare name are a conflict naming their ids."""

from __future__ import annotations

import pytest

from flashpoint.errors import ConflictError, NotFoundError
from flashpoint.scheduler.names import resolve

#: every endpoint's key to its bare name: one outside any app, and "embed" in two apps
NAMES = {
    "echo": "echo",
    "shop.production.embed": "embed",
    "lab.staging.embed": "embed",
    "shop.production.rank": "rank",
    "rank": "rank",
}


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("echo", "echo"),  # registered without an app: its key is its name
        ("shop.production.embed", "shop.production.embed"),  # an id
        ("lab.staging.embed", "lab.staging.embed"),
        ("rank", "rank"),  # an exact key wins over the bare name of shop.production.rank
        ("shop.production.rank", "shop.production.rank"),
    ],
)
def test_a_key_or_a_bare_name_one_endpoint_has_resolves(name: str, key: str) -> None:
    assert resolve(name, NAMES) == key


def test_a_bare_name_unique_on_the_plane_resolves_to_its_id() -> None:
    assert resolve("embed", {"shop.production.embed": "embed", "echo": "echo"}) == "shop.production.embed"


def test_a_bare_name_several_apps_have_is_a_conflict_naming_the_ids() -> None:
    with pytest.raises(ConflictError) as caught:
        resolve("embed", NAMES)
    assert str(caught.value) == (
        "endpoint 'embed' is deployed in several apps: lab.staging.embed, shop.production.embed; call it by id"
    )


@pytest.mark.parametrize("name", ["nope", "shop.production", "production.embed", ""])
def test_no_match_is_not_found_listing_the_endpoints(name: str) -> None:
    with pytest.raises(NotFoundError, match="endpoints: echo, lab.staging.embed, rank, shop.production.embed"):
        resolve(name, NAMES)


def test_an_empty_plane_says_none() -> None:
    with pytest.raises(NotFoundError, match="endpoints: none"):
        resolve("echo", {})
