"""The server's quota store on a real file (decision 0113): set merges limits per scope, delete, the plane's read from
memory and its reread when the file changes, hostile input refused saying what to write, a foreign file refused."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from flashpoint.errors import BadInputError, ConfigError
from flashpoint.hosting.quotastore import MAX_QUOTAS, QuotaStore
from flashpoint.scheduler.quotas import Quota


class Ticks:
    """The store's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_set_keeps_one_record_per_scope_and_merges_its_limits(tmp_path: Path) -> None:
    store = QuotaStore(tmp_path / "quotas")
    store.set(app="shop", max_gpus=8)
    store.set(app="shop", model="H100", max_gpus=2)
    store.set(app="shop", model="nvidia_h200", max_gpus=1)
    quota = store.set(app="shop", gpu_hours=100, period="7d")
    assert quota == Quota(
        app="shop",
        max_gpus=8,
        models=(("NVIDIA H100 80GB HBM3", 2), ("NVIDIA H200", 1)),
        gpu_hours=100.0,
        period_s=7 * 86400,
    )
    assert store.list() == [quota]
    # the file is private, and another store on the same folder reads the same
    assert stat.S_IMODE((tmp_path / "quotas" / "quotas.json").stat().st_mode) == 0o600
    assert QuotaStore(tmp_path / "quotas").list() == [quota]


def test_a_budget_without_a_period_is_per_24h(tmp_path: Path) -> None:
    quota = QuotaStore(tmp_path).set(app="shop", env="prod", gpu_hours=2.5)
    assert quota.period_s == 86400 and quota.gpu_hours == 2.5


def test_scopes_are_apps_environments_keys_and_keys_within_an_app(tmp_path: Path) -> None:
    store = QuotaStore(tmp_path)
    store.set(key="ci", max_gpus=1)
    store.set(app="shop", env="prod", max_gpus=2)
    store.set(app="shop", max_gpus=4)
    store.set(app="shop", key="ci", max_gpus=1)
    assert [q.scope for q in store.list()] == [
        (None, None, "ci"),
        ("shop", None, None),
        ("shop", None, "ci"),
        ("shop", "prod", None),
    ]


def test_delete_removes_a_scope_or_one_models_limit(tmp_path: Path) -> None:
    store = QuotaStore(tmp_path)
    store.set(app="shop", max_gpus=8)
    store.set(app="shop", model="H100", max_gpus=2)
    store.set(app="other", model="H100", max_gpus=2)
    assert store.delete(app="shop", model="H100")
    assert store.list()[1] == Quota(app="shop", max_gpus=8)
    assert store.delete(app="other", model="H100")  # its last limit: the record goes
    assert [q.app for q in store.list()] == ["shop"]
    assert store.delete(app="shop")
    assert not store.delete(app="shop")
    assert store.list() == []


def test_the_planes_read_is_from_memory_and_sees_another_writer_within_a_second(tmp_path: Path) -> None:
    ticks = Ticks()
    store = QuotaStore(tmp_path, monotonic=ticks)
    assert store.quotas() == ()
    store.set(app="shop", max_gpus=1)
    assert store.quotas() == (Quota(app="shop", max_gpus=1),)  # its own write: at once
    QuotaStore(tmp_path).set(app="shop", max_gpus=3)  # flashpoint quota set --data-dir, beside the server
    assert store.quotas() == (Quota(app="shop", max_gpus=1),)
    ticks.now += 1.0
    assert store.quotas() == (Quota(app="shop", max_gpus=3),)


def test_a_broken_file_keeps_the_quotas_read_before_in_force(tmp_path: Path) -> None:
    ticks = Ticks()
    store = QuotaStore(tmp_path, monotonic=ticks)
    store.set(app="shop", max_gpus=1)
    (tmp_path / "quotas.json").write_text("{not json")
    ticks.now += 5
    assert store.quotas() == (Quota(app="shop", max_gpus=1),)
    with pytest.raises(ConfigError, match="not one this flashpoint wrote"):
        store.list()


@pytest.mark.parametrize(
    "body",
    [
        {"version": 2, "quotas": []},
        {"version": 1, "quotas": [{"app": "../etc", "maxGpus": 1}]},
        {"version": 1, "quotas": [{"env": "prod", "maxGpus": 1}]},
        {"version": 1, "quotas": [{"app": "a", "maxGpus": 1}, {"app": "a", "maxGpus": 2}]},
        {"version": 1, "quotas": [{"app": "a", "maxGpus": "1"}]},
        {"version": 1, "quotas": "all"},
        [],
    ],
)
def test_a_file_this_flashpoint_did_not_write_is_refused_never_rewritten(tmp_path: Path, body: object) -> None:
    (tmp_path / "quotas.json").write_text(json.dumps(body))
    store = QuotaStore(tmp_path)
    with pytest.raises(ConfigError, match="move it away"):
        store.set(app="shop", max_gpus=1)
    assert json.loads((tmp_path / "quotas.json").read_text()) == body


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({}, "say whose quota it is: --app A"),
        ({"app": "shop"}, "say what to limit: --max-gpus N"),
        ({"env": "prod", "max_gpus": 1}, "say whose quota it is"),
        ({"app": "shop", "env": "prod/../x", "max_gpus": 1}, "--env is a name of letters"),
        ({"app": "a" * 64, "max_gpus": 1}, "at most 63"),
        ({"app": "shop", "key": "bad key", "max_gpus": 1}, "--key is a name of letters, digits, '.'"),
        ({"app": "shop", "max_gpus": -1}, "--max-gpus is a whole number from 0"),
        ({"app": "shop", "max_gpus": 1.5}, "--max-gpus is a whole number of GPUs"),
        ({"app": "shop", "max_gpus": True}, "--max-gpus is a whole number of GPUs"),
        ({"app": "shop", "model": "H100"}, "give --max-gpus N with it"),
        ({"app": "shop", "model": "H9000", "max_gpus": 1}, "--model:"),
        ({"app": "shop", "model": "any", "max_gpus": 1}, "not a pool or any"),
        ({"app": "shop", "model": "x" * 500, "max_gpus": 1}, "--model names one GPU model"),
        ({"app": "shop", "gpu_hours": 0}, "--gpu-hours is a number of GPU-hours above 0"),
        ({"app": "shop", "gpu_hours": float("nan")}, "--gpu-hours is a number"),
        ({"app": "shop", "gpu_hours": 1, "period": "1y"}, "--period: write a period as"),
        ({"app": "shop", "period": "24h"}, "give --gpu-hours H with it"),
    ],
)
def test_hostile_or_wrong_input_is_refused_saying_what_to_write(
    tmp_path: Path, options: dict[str, object], says: str
) -> None:
    store = QuotaStore(tmp_path)
    with pytest.raises(BadInputError) as refused:
        store.set(**options)  # type: ignore[arg-type]
    assert says in str(refused.value)
    assert not (tmp_path / "quotas.json").exists()


def test_the_number_of_quotas_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flashpoint.hosting.quotastore.MAX_QUOTAS", 2)  # a smaller bound, to reach it quickly
    store = QuotaStore(tmp_path)
    store.set(app="a", max_gpus=1)
    store.set(app="b", max_gpus=1)
    store.set(app="b", max_gpus=2)  # the same scope: no new record
    with pytest.raises(BadInputError, match="at most 2 quotas"):
        store.set(app="c", max_gpus=1)
    assert MAX_QUOTAS == 1000
