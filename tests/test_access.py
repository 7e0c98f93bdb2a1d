"""The access rule (``access.py``) as one table: every scope, limited to no app, one app or one environment,
against every operation on a resource of its own app and environment, of its app's whole, of its app's other
environment, of another app, and of the server itself."""

from __future__ import annotations

import pytest

from flashpoint.access import (
    ADMIN_SERVER,
    ALLOW,
    HIDDEN,
    Decision,
    Forbidden,
    Operation,
    Principal,
    decide,
    decide_endpoint,
    endpoint_visible,
    job_operation,
    visible,
)

KEYS = {
    "server": ADMIN_SERVER,
    "deploy-all": Principal("d", "deploy", None, None),
    "deploy-app": Principal("d", "deploy", "shop", None),
    "deploy-env": Principal("d", "deploy", "shop", "prod"),
    "invoke-all": Principal("i", "invoke", None, None),
    "invoke-app": Principal("i", "invoke", "shop", None),
    "invoke-env": Principal("i", "invoke", "shop", "prod"),
}
#: the resource's (app, env)
TARGETS = {
    "own": ("shop", "prod"),
    "whole-app": ("shop", None),
    "other-env": ("shop", "staging"),
    "other-app": ("blog", "prod"),
    "server": (None, None),
}
OPS = (Operation.INVOKE, Operation.READ, Operation.DEPLOY, Operation.ADMIN)
#: one letter per operation, in OPS's order: a allow, h hidden (404), d/A forbidden naming deploy/admin (403),
#: w forbidden naming deploy for the whole app
TABLE = {
    "server": {"own": "aaaa", "whole-app": "aaaa", "other-env": "aaaa", "other-app": "aaaa", "server": "aaaa"},
    "deploy-all": {"own": "aaaA", "whole-app": "aaaA", "other-env": "aaaA", "other-app": "aaaA", "server": "AAAA"},
    "deploy-app": {"own": "aaaA", "whole-app": "aaaA", "other-env": "aaaA", "other-app": "hhhh", "server": "AAAA"},
    "deploy-env": {"own": "aaaA", "whole-app": "aawA", "other-env": "hhhh", "other-app": "hhhh", "server": "AAAA"},
    "invoke-all": {"own": "addA", "whole-app": "addA", "other-env": "addA", "other-app": "addA", "server": "AAAA"},
    "invoke-app": {"own": "addA", "whole-app": "addA", "other-env": "addA", "other-app": "hhhh", "server": "AAAA"},
    "invoke-env": {"own": "addA", "whole-app": "addA", "other-env": "hhhh", "other-app": "hhhh", "server": "AAAA"},
}


def letter(decision: Decision) -> str:
    if decision is ALLOW:
        return "a"
    if decision is HIDDEN:
        return "h"
    assert isinstance(decision, Forbidden)
    if decision.reach:
        assert decision.needed == "deploy" and "for all of app 'shop'" in decision.message()
        return "w"
    return {"deploy": "d", "admin": "A"}[decision.needed]


CASES = [(key, target, op) for key in KEYS for target in TARGETS for op in OPS]


@pytest.mark.parametrize(("key", "target", "op"), CASES, ids=[f"{k}-{t}-{o.value}" for k, t, o in CASES])
def test_the_table(key: str, target: str, op: Operation) -> None:
    app, env = TARGETS[target]
    expected = TABLE[key][target][OPS.index(op)]
    assert letter(decide(KEYS[key], op, app, env)) == expected


def test_the_table_is_complete() -> None:
    assert set(TABLE) == set(KEYS) and all(set(row) == set(TARGETS) for row in TABLE.values())


def test_hidden_comes_before_any_scope_answer() -> None:
    # an invoke key asking to administer another app's resource learns nothing: 404 as for one that does not exist
    assert decide(KEYS["invoke-app"], Operation.ADMIN, "blog", None) is HIDDEN
    assert decide(KEYS["deploy-env"], Operation.DEPLOY, "shop", "staging") is HIDDEN
    assert decide(KEYS["deploy-env"], Operation.ADMIN, "shop", "staging") is HIDDEN


def test_forbidden_names_the_scope_needed_and_the_key() -> None:
    decision = decide(KEYS["invoke-env"], Operation.DEPLOY, "shop", "prod")
    assert isinstance(decision, Forbidden)
    assert decision.message() == (
        "key 'i' (invoke scope for app shop, env prod) may not deploy, roll back or undeploy: that needs a key with "
        "the deploy scope"
    )
    admin = decide(KEYS["deploy-all"], Operation.ADMIN, "shop", None)
    assert isinstance(admin, Forbidden) and "needs a key with the admin scope" in admin.message()
    assert "key 'd' (deploy scope)" in admin.message()
    server = decide(KEYS["deploy-app"], Operation.READ, None, None)
    assert isinstance(server, Forbidden) and "may not act on the whole server" in server.message()
    assert Forbidden("admin").message() == "this key may not do this: that needs a key with the admin scope"


def test_an_unknown_scope_may_do_nothing() -> None:
    odd = Principal("x", "superuser", None, None)
    assert all(isinstance(decide(odd, op, "shop", "prod"), Forbidden) for op in OPS)


@pytest.mark.parametrize(
    ("key", "app", "env", "seen"),
    [
        ("server", None, None, True),
        ("server", "blog", "x", True),
        ("deploy-all", None, None, False),
        ("deploy-all", "blog", "prod", True),
        ("invoke-app", "shop", None, True),
        ("invoke-app", "shop", "staging", True),
        ("invoke-app", "blog", None, False),
        ("invoke-app", "shopping", None, False),
        ("invoke-env", "shop", "prod", True),
        ("invoke-env", "shop", None, True),
        ("invoke-env", "shop", "staging", False),
        ("invoke-env", "blog", "prod", False),
        ("deploy-env", "Shop", "prod", False),  # names are compared exactly
    ],
)
def test_visible(key: str, app: str | None, env: str | None, seen: bool) -> None:
    assert visible(KEYS[key], app, env) is seen


def test_a_job_is_the_keys_own_to_invoke_else_a_read() -> None:
    invoke = KEYS["invoke-app"]
    assert job_operation(invoke, "i") is Operation.INVOKE
    assert job_operation(invoke, "d") is Operation.READ
    assert job_operation(invoke, None) is Operation.READ
    assert decide(invoke, job_operation(invoke, "i"), "shop", "prod") is ALLOW
    assert isinstance(decide(invoke, job_operation(invoke, "server"), "shop", "prod"), Forbidden)
    assert job_operation(ADMIN_SERVER, "server") is Operation.INVOKE


# --------------------------------------------------------------------------------------------------------------------
# endpoints served outside any app (decision 0100): keys limited to no app reach them as an app's, others never see them


@pytest.mark.parametrize(
    ("key", "op", "expected"),
    [
        ("server", Operation.INVOKE, ALLOW),
        ("server", Operation.ADMIN, ALLOW),
        ("deploy-all", Operation.INVOKE, ALLOW),
        ("deploy-all", Operation.READ, ALLOW),
        ("deploy-all", Operation.DEPLOY, ALLOW),
        ("deploy-all", Operation.ADMIN, "admin"),
        ("invoke-all", Operation.INVOKE, ALLOW),
        ("invoke-all", Operation.READ, "deploy"),
        ("deploy-app", Operation.INVOKE, HIDDEN),
        ("deploy-env", Operation.READ, HIDDEN),
        ("invoke-app", Operation.INVOKE, HIDDEN),
        ("invoke-env", Operation.INVOKE, HIDDEN),
    ],
)
def test_an_endpoint_of_no_app(key: str, op: Operation, expected: object) -> None:
    who = KEYS[key]
    decision = decide_endpoint(who, op, None, None)
    if isinstance(expected, str):
        assert isinstance(decision, Forbidden) and decision.needed == expected
        assert f"the {expected} scope" in decision.message()
    else:
        assert decision is expected
    assert endpoint_visible(who, None, None) is (expected is not HIDDEN)


def test_an_endpoint_of_an_app_is_decided_as_the_app() -> None:
    for who in KEYS.values():
        for op in Operation:
            assert decide_endpoint(who, op, "shop", "prod") == decide(who, op, "shop", "prod")
            assert endpoint_visible(who, "shop", "prod") is visible(who, "shop", "prod")
