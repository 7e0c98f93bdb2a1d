"""hosting/deployments.py: apps, environments and numbered versions in a real SQLite file, through a fake clock."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from flashpoint.errors import BadInputError, ConflictError, NotFoundError, StoreError
from flashpoint.hosting.deployments import INTERRUPTED, Deployments, check_name

D1, D2, D3, D4 = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 1
        return self.t


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "deployments.db"


@pytest.fixture
def db(path: Path) -> Iterator[Deployments]:
    records = Deployments(path, now=Clock())
    yield records
    records.close()


def _serve(db: Deployments, digest: str, app: str = "shop", env: str = "prod", by: str = "ann") -> int:
    version = db.begin(app, env, digest=digest, by=by, manifest={"endpoints": [digest[:1]]})
    db.finish(app, env, version.number, "serving")
    return version.number


def _outcomes(db: Deployments, app: str = "shop", env: str = "prod") -> dict[int, str]:
    return {v.number: v.outcome for v in db.versions(app, env)}


def _one_serving(db: Deployments) -> None:
    """The invariant: at most one serving and one pending version per environment."""
    for app in db.list_apps():
        for env in db.list_envs(app.name):
            outcomes = [v.outcome for v in db.versions(app.name, env.name)]
            assert outcomes.count("serving") <= 1 and outcomes.count("pending") <= 1


GOOD = ["a", "A", "0", "shop", "my-app", "my_app", "a" * 63, "prod-2"]
BAD = ["", "..", ".", "a.b", "/", "a/b", "-a", "_a", "a" * 64, "é", "naïve", "a\0", "a b", "a\n", "ｓhop", None, 3]


@pytest.mark.parametrize("name", GOOD)
def test_good_names(name: str) -> None:
    assert check_name("app", name) == name


@pytest.mark.parametrize("name", BAD)
def test_bad_names_say_the_rule(name: object) -> None:
    with pytest.raises(BadInputError, match=r"app name must be letters, digits, '_' or '-' \(at most 63\), starting"):
        check_name("app", name)


@pytest.mark.parametrize("name", ["..", "a.b", "/", "", "a" * 64])
def test_bad_names_never_reach_the_records(db: Deployments, name: str) -> None:
    with pytest.raises(BadInputError, match="environment name"):
        db.begin("shop", name, digest=D1, by="ann", manifest={})
    with pytest.raises(BadInputError, match="app name"):
        db.create_env(name, "prod", by="ann")
    assert db.list_apps() == []


def test_file_is_private(path: Path, db: Deployments) -> None:
    _serve(db, D1)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for companion in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        if companion.exists():
            assert stat.S_IMODE(companion.stat().st_mode) & 0o077 == 0


def test_apps_and_envs(db: Deployments) -> None:
    app = db.create_app("shop", by="ann")
    assert (app.name, app.created_by, app.created_at) == ("shop", "ann", 1001.0)
    with pytest.raises(ConflictError, match="exists"):
        db.create_app("shop", by="bob")
    env = db.create_env("blog", "staging", by="bob")  # makes the app
    assert (env.app, env.name, env.serving, env.removed) == ("blog", "staging", None, frozenset())
    assert [a.name for a in db.list_apps()] == ["blog", "shop"]
    with pytest.raises(ConflictError):
        db.create_env("blog", "staging", by="bob")
    db.create_env("blog", "prod", by="bob")
    assert [e.name for e in db.list_envs("blog")] == ["prod", "staging"]
    with pytest.raises(NotFoundError):
        db.list_envs("nope")
    assert db.get_app("nope") is None and db.get_env("blog", "nope") is None
    assert db.delete_env("blog", "prod") and not db.delete_env("blog", "prod")
    assert app.to_json() == {"name": "shop", "created_by": "ann", "created_at": 1001.0}
    assert env.to_json() == {
        "app": "blog", "name": "staging", "created_by": "bob", "created_at": 1003.0, "serving": None, "removed": []
    }  # fmt: skip


def test_numbering_and_outcomes(db: Deployments) -> None:
    assert _serve(db, D1) == 1
    assert _outcomes(db) == {1: "serving"}
    assert _serve(db, D2) == 2
    assert _outcomes(db) == {2: "serving", 1: "replaced"}
    failed = db.begin("shop", "prod", digest=D3, by="bob", manifest={})
    assert (failed.number, failed.outcome) == (3, "pending")
    db.finish("shop", "prod", 3, "failed", "worker exited 1")
    assert _outcomes(db) == {3: "failed", 2: "serving", 1: "replaced"}
    assert db.versions("shop", "prod")[0].detail == "worker exited 1"
    serving = db.serving("shop", "prod")
    assert serving is not None and (serving.number, serving.digest, serving.manifest) == (2, D2, {"endpoints": ["2"]})
    assert serving.to_json() == {
        "app": "shop", "env": "prod", "number": 2, "digest": D2, "created_by": "ann",
        "created_at": serving.created_at, "outcome": "serving", "detail": "",
    }  # fmt: skip
    assert db.history("shop", "prod")[0].to_json() == {
        "kind": "deploy", "version": 1, "by": "ann", "at": db.history("shop", "prod")[0].at, "detail": ""
    }  # fmt: skip
    assert db.begin("shop", "staging", digest=D1, by="ann", manifest={}).number == 1  # per environment
    assert [(e.kind, e.version) for e in db.history("shop", "prod")] == [
        ("deploy", 1), ("serve", 1), ("deploy", 2), ("serve", 2), ("deploy", 3), ("fail", 3)
    ]  # fmt: skip
    _one_serving(db)


def test_one_pending_per_environment(db: Deployments) -> None:
    db.begin("shop", "prod", digest=D1, by="ann", manifest={})
    with pytest.raises(ConflictError, match="version 1 of shop/prod is still rolling out"):
        db.begin("shop", "prod", digest=D2, by="bob", manifest={})
    db.begin("shop", "staging", digest=D2, by="bob", manifest={})  # another environment is free
    db.finish("shop", "prod", 1, "failed", "boom")
    assert db.begin("shop", "prod", digest=D2, by="bob", manifest={}).number == 2


def test_finish_refuses_what_is_not_rolling_out(db: Deployments) -> None:
    _serve(db, D1)
    with pytest.raises(ConflictError, match="serving, not rolling out"):
        db.finish("shop", "prod", 1, "failed")
    with pytest.raises(NotFoundError):
        db.finish("shop", "prod", 9, "serving")
    with pytest.raises(NotFoundError):
        db.finish("shop", "nope", 1, "serving")
    db.begin("shop", "prod", digest=D2, by="ann", manifest={})
    with pytest.raises(BadInputError):
        db.finish("shop", "prod", 2, "replaced")  # type: ignore[arg-type]


def test_rollback(db: Deployments) -> None:
    for digest in (D1, D2):
        _serve(db, digest)
    db.begin("shop", "prod", digest=D3, by="ann", manifest={})
    db.finish("shop", "prod", 3, "failed", "no GPU")
    _serve(db, D4)  # 4 serves; 1, 2 replaced; 3 failed
    back = db.rollback("shop", "prod", by="carl")
    assert (back.number, back.outcome) == (2, "serving")  # the newest replaced before 4, skipping the failed 3
    assert _outcomes(db) == {4: "replaced", 3: "failed", 2: "serving", 1: "replaced"}
    assert db.rollback("shop", "prod", by="carl").number == 1
    with pytest.raises(NotFoundError, match="no earlier version"):
        db.rollback("shop", "prod", by="carl")
    assert db.rollback("shop", "prod", to=4, by="carl").number == 4  # forward again, no new number
    with pytest.raises(BadInputError, match="failed and never served"):
        db.rollback("shop", "prod", to=3, by="carl")
    with pytest.raises(BadInputError, match="the one serving"):
        db.rollback("shop", "prod", to=4, by="carl")
    with pytest.raises(NotFoundError, match="no version 9"):
        db.rollback("shop", "prod", to=9, by="carl")
    assert [v.number for v in db.versions("shop", "prod")] == [4, 3, 2, 1]
    events = [(e.kind, e.version, e.by, e.detail) for e in db.history("shop", "prod") if e.kind == "rollback"]
    assert events == [
        ("rollback", 2, "carl", "from version 4"),
        ("rollback", 1, "carl", "from version 2"),
        ("rollback", 4, "carl", "from version 1"),
    ]
    _one_serving(db)


def test_rollback_waits_for_a_rollout(db: Deployments) -> None:
    _serve(db, D1)
    _serve(db, D2)
    db.begin("shop", "prod", digest=D3, by="ann", manifest={})
    with pytest.raises(ConflictError, match="still rolling out"):
        db.rollback("shop", "prod", by="ann")
    with pytest.raises(ConflictError, match="still rolling out"):
        db.rollback("shop", "prod", to=1, by="ann")
    with pytest.raises(ConflictError, match="still rolling out"):
        db.undeploy("shop", "prod", by="ann")
    db.finish("shop", "prod", 3, "serving")
    assert db.rollback("shop", "prod", by="ann").number == 2


def test_undeploy_the_environment_and_an_endpoint(db: Deployments) -> None:
    _serve(db, D1)
    env = db.undeploy("shop", "prod", endpoint="resize", by="ann")
    assert env.serving == 1 and env.removed == frozenset({"resize"})
    env = db.undeploy("shop", "prod", endpoint="crop", by="ann")
    assert env.removed == frozenset({"crop", "resize"})
    _serve(db, D2)  # the next deploy clears the removed set
    after = db.get_env("shop", "prod")
    assert after is not None and after.removed == frozenset() and after.serving == 2
    env = db.undeploy("shop", "prod", by="bob")
    assert env.serving is None and db.serving("shop", "prod") is None
    assert _outcomes(db) == {2: "replaced", 1: "replaced"}
    with pytest.raises(ConflictError, match="nothing serves"):
        db.undeploy("shop", "prod", by="bob")
    assert db.rollback("shop", "prod", by="bob").number == 2  # back up: the newest that served
    db.undeploy("shop", "prod", endpoint="resize", by="ann")
    db.rollback("shop", "prod", to=1, by="ann")
    after = db.get_env("shop", "prod")
    assert after is not None and after.removed == frozenset()  # a rollback clears it too
    kinds = [(e.kind, e.version, e.detail) for e in db.history("shop", "prod") if e.kind == "undeploy"]
    assert kinds == [
        ("undeploy", 1, "endpoint resize"), ("undeploy", 1, "endpoint crop"), ("undeploy", 2, ""),
        ("undeploy", 2, "endpoint resize"),
    ]  # fmt: skip
    with pytest.raises(BadInputError):
        db.undeploy("shop", "prod", endpoint="", by="ann")


def test_delete_app_cascades(path: Path, db: Deployments) -> None:
    _serve(db, D1)
    _serve(db, D1, env="staging")
    assert db.delete_app("shop") and not db.delete_app("shop")
    assert db.list_apps() == [] and db.versions("shop", "prod") == [] and db.history("shop", "prod") == []
    assert db.recover() == []
    assert _serve(db, D2) == 1  # a new app of that name starts again


def test_durable_across_reopen(path: Path) -> None:
    first = Deployments(path, now=Clock())
    _serve(first, D1)
    _serve(first, D2)
    first.undeploy("shop", "prod", endpoint="resize", by="ann")
    first.close()
    with pytest.raises(StoreError, match="closed"):
        first.list_apps()
    again = Deployments(path, now=Clock())
    assert _outcomes(again) == {2: "serving", 1: "replaced"}
    env = again.get_env("shop", "prod")
    assert env is not None and env.removed == frozenset({"resize"})
    assert len(again.history("shop", "prod")) == 5
    again.close()


def test_recover_after_a_crash(path: Path) -> None:
    crashed = Deployments(path, now=Clock())
    _serve(crashed, D1)
    crashed.begin("shop", "prod", digest=D2, by="ann", manifest={})  # the server dies during the rollout
    crashed.begin("blog", "prod", digest=D3, by="ann", manifest={})
    crashed.close()
    records = Deployments(path, now=Clock())
    serving = records.recover()
    assert [(v.app, v.env, v.number, v.outcome) for v in serving] == [("shop", "prod", 1, "serving")]
    assert _outcomes(records) == {2: "failed", 1: "serving"}
    assert records.versions("shop", "prod")[0].detail == INTERRUPTED
    assert records.versions("blog", "prod")[0].outcome == "failed"
    assert records.history("shop", "prod")[-1].kind == "fail"
    assert records.begin("shop", "prod", digest=D2, by="ann", manifest={}).number == 3  # deploys again
    _one_serving(records)
    records.close()


def test_the_file_refuses_a_second_serving_version(path: Path, db: Deployments) -> None:
    """The invariant is the schema's too: a write that would make two serving versions fails."""
    _serve(db, D1)
    _serve(db, D2)
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("update versions set outcome = 'serving' where number = 1")
    conn.close()


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "deployments.db"
    path.write_bytes(b"not a database" * 100)
    os.chmod(path, 0o600)
    with pytest.raises(StoreError, match="deployment records"):
        Deployments(path)
