"""``api/guard.py`` alone: what each kind of key is as a Principal (``identify``), the key store's adapter, the 404s
that stand for what a key may not see, and the submitter a request's jobs record. Every route's use of it is
``tests/api/test_scope_matrix.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from flashpoint.access import ADMIN_SERVER, Principal
from flashpoint.api.guard import (
    CALLER_NAME,
    caller_worker,
    hidden_app,
    identify,
    key_state,
    keyless,
    principal_lookup,
    sees_endpoint,
)
from flashpoint.hosting.keystore import KeyStore
from flashpoint.scheduler.credentials import caller_credential
from tests.scheduler.door import open_door


@dataclass
class _Info:
    name: str
    scope: str
    app: str | None
    env: str | None


class _Store:
    def lookup(self, token: str) -> _Info | None:
        return _Info("ci", "deploy", "shop", "prod") if token == "fpk_good" else None


def test_the_adapter_turns_what_the_store_knows_into_a_principal(tmp_path: Path) -> None:
    lookup = principal_lookup(_Store())
    assert lookup("fpk_good") == Principal("ci", "deploy", "shop", "prod")
    assert lookup("fpk_other") is None
    store = KeyStore(tmp_path / "keys")
    _, token = store.create("ops", scope="invoke", app="shop", by="server")
    assert principal_lookup(store)(token) == Principal("ops", "invoke", "shop", None)


async def test_each_kind_of_key_is_its_principal() -> None:
    door = await open_door()
    try:
        state = key_state(("server-key",), principal_lookup(_Store()))
        plane = door.plane
        assert identify(plane, state, "Bearer server-key") is ADMIN_SERVER
        assert identify(plane, state, "server-key") is ADMIN_SERVER  # the raw key, as workers send theirs
        assert identify(plane, state, "Bearer fpk_good") == Principal("ci", "deploy", "shop", "prod")
        assert identify(plane, state, "Bearer fpk_other") is None
        assert identify(plane, state, None) is None
        assert identify(plane, state, "Bearer wrong") is None
        # a worker's caller key: an invoke key named after its worker, limited to its worker's app and environment
        for endpoint, app, env in (("shop.prod.embed", "shop", "prod"), ("plain", None, None)):
            token = caller_credential(plane.worker_credential(endpoint, "w-1"), endpoint, "w-1")
            who = identify(plane, state, f"Bearer {token}")
            assert who == Principal(CALLER_NAME + "w-1", "invoke", app, env)
            assert who is not None and caller_worker(who) == "w-1"
        assert caller_worker(ADMIN_SERVER) is None
        # without a plane there are no caller keys
        assert identify(None, state, f"Bearer {token}") is None
    finally:
        await door.plane.close()


def test_a_server_without_keys_is_the_admin_unless_a_scoped_key_says_otherwise() -> None:
    bare = key_state(())
    assert keyless(bare) and not keyless(key_state(("k",)))
    assert identify(None, bare, None) is ADMIN_SERVER
    assert identify(None, bare, "Bearer anything") is ADMIN_SERVER
    scoped = key_state((), principal_lookup(_Store()))
    assert identify(None, scoped, "Bearer fpk_good") == Principal("ci", "deploy", "shop", "prod")


async def test_on_a_server_without_keys_a_deployed_workers_caller_key_is_still_limited_to_its_app() -> None:
    # decision 0104: fan-out by a bare name stays inside the worker's app and environment, key or no key; a worker of
    # a served project (no app) stays the admin there, as every local caller is
    door = await open_door()
    try:
        bare, plane = key_state(()), door.plane
        deployed = caller_credential(plane.worker_credential("shop.prod.front", "w-1"), "shop.prod.front", "w-1")
        assert identify(plane, bare, f"Bearer {deployed}") == Principal(CALLER_NAME + "w-1", "invoke", "shop", "prod")
        served = caller_credential(plane.worker_credential("front", "w-2"), "front", "w-2")
        assert identify(plane, bare, f"Bearer {served}") is ADMIN_SERVER
        tampered = deployed[:-1] + ("B" if deployed.endswith("A") else "A")
        assert identify(plane, bare, f"Bearer {tampered}") is ADMIN_SERVER  # not a caller key: any local caller
    finally:
        await door.plane.close()


@pytest.mark.parametrize(
    ("who", "app", "env", "words"),
    [
        (Principal("k", "deploy", "other", None), "shop", None, "app 'shop' is not deployed"),
        (Principal("k", "deploy", "other", None), "shop", "prod", "app 'shop' is not deployed"),
        (Principal("k", "deploy", "shop", "prod"), "shop", "staging", "app 'shop' has no environment 'staging'"),
    ],
)
def test_what_a_key_may_not_see_is_worded_as_absent(who: Principal, app: str, env: str | None, words: str) -> None:
    assert str(hidden_app(who, app, env)).startswith(words)


def test_endpoints_of_no_app_are_seen_by_keys_of_no_app() -> None:
    assert sees_endpoint(Principal("k", "invoke", None, None), "plain")
    assert not sees_endpoint(Principal("k", "invoke", "shop", None), "plain")
    assert sees_endpoint(Principal("k", "invoke", "shop", None), "shop.prod.embed")
    assert not sees_endpoint(Principal("k", "invoke", "shop", "prod"), "shop.staging.embed")
