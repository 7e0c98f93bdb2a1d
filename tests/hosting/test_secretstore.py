"""The server's secret store (``hosting/secretstore.py``): set, list, delete and resolve, server-wide and per app,
in a private file written whole; hostile names, apps and values refused without quoting a value."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuGroup, Secret
from flashpoint.errors import BadInputError, ConfigError
from flashpoint.hosting.secretstore import MAX_VALUE_BYTES, SecretInfo, SecretStore

VALUE = "hf_s3cr3t-VALUE-0xdeadbeef"


class Ticks:
    """Wall time that moves one second per reading."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


@pytest.fixture
def store(tmp_path: Path) -> SecretStore:
    return SecretStore(tmp_path / "data" / "secrets", now=Ticks())


def test_set_resolve_list_delete(store: SecretStore) -> None:
    assert store.resolve("HF_TOKEN") is None
    info = store.set("HF_TOKEN", VALUE)
    assert info == SecretInfo("HF_TOKEN", None, 1001.0, 1001.0)
    assert store.resolve("HF_TOKEN") == VALUE
    # set again: the value and the update date change, the creation date stays
    assert store.set("HF_TOKEN", "other") == SecretInfo("HF_TOKEN", None, 1001.0, 1002.0)
    assert store.resolve("HF_TOKEN") == "other"
    assert store.list() == [SecretInfo("HF_TOKEN", None, 1001.0, 1002.0)]
    assert store.delete("HF_TOKEN") is True
    assert store.delete("HF_TOKEN") is False
    assert store.resolve("HF_TOKEN") is None
    assert store.list() == []


def test_an_apps_secret_wins_over_the_server_wide_one_for_that_app_only(store: SecretStore) -> None:
    store.set("key", "server")
    store.set("key", "app-a", app="a")
    store.set("only-b", "b", app="b")
    assert store.resolve("key") == "server"
    assert store.resolve("key", app="a") == "app-a"
    assert store.resolve("key", app="b") == "server"
    assert store.resolve("only-b", app="a") is None
    assert store.resolve("only-b") is None
    assert store.resolver("b")("only-b") == "b"
    assert store.resolver()("key") == "server"
    assert [(i.app, i.name) for i in store.list()] == [(None, "key"), ("a", "key"), ("b", "only-b")]
    assert [(i.app, i.name) for i in store.list(app="a", every=False)] == [(None, "key"), ("a", "key")]
    # deleting the app's secret leaves the server-wide one of the same name
    assert store.delete("key", app="a") is True
    assert store.resolve("key", app="a") == "server"


def test_the_file_and_folder_are_private_and_hold_no_leftovers(store: SecretStore) -> None:
    store.set("a", VALUE)
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert sorted(p.name for p in store.root.iterdir()) == ["lock", "secrets.json"]


def test_a_second_store_on_the_same_folder_sees_every_change(store: SecretStore) -> None:
    # two handles (two processes, say) on one folder: each change reads the file afresh, under the lock
    other = SecretStore(store.root)
    store.set("a", "1")
    other.set("b", "2")
    store.set("c", "3")
    assert {i.name for i in other.list()} == {"a", "b", "c"}
    assert other.resolve("a") == "1"


def test_nothing_shows_a_value(store: SecretStore) -> None:
    info = store.set("HF_TOKEN", VALUE)
    assert VALUE not in repr(info) + repr(store) + repr(store.list())


@pytest.mark.parametrize(
    "name",
    [
        "",
        "../etc/passwd",
        "a/b",
        "..",
        ".hidden",
        "9starts-with-digit",
        "-dash",
        "with space",
        "nul\0byte",
        "tab\t",
        "é",
        "a" * 192,
        "RUNPOD_API_KEY",
        "runpod-x",
        "{{x}}",
        "a}}",
    ],
)
def test_hostile_names_are_refused(store: SecretStore, name: str) -> None:
    with pytest.raises(BadInputError):
        store.set(name, VALUE)
    with pytest.raises(BadInputError):
        store.delete(name)
    assert store.resolve(name) is None
    assert not store.path.exists()


@pytest.mark.parametrize("name", ["a", "_", "HF_TOKEN", "hf-token", "my.key_2", "A" * 191, "Runp"])
def test_good_names(store: SecretStore, name: str) -> None:
    store.set(name, VALUE)
    assert store.resolve(name) == VALUE


@pytest.mark.parametrize("app", ["", "..", "../x", "a/b", "x\0", " a", "a" * 129])
def test_hostile_apps_are_refused(store: SecretStore, app: str) -> None:
    with pytest.raises(BadInputError):
        store.set("a", VALUE, app=app)
    with pytest.raises(BadInputError):
        store.list(app=app)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "non-empty"),
        ("abc\0def", "NUL"),
        ("lone \udc80 surrogate", "surrogate"),
        ("x" * (MAX_VALUE_BYTES + 1), "bytes"),
    ],
)
def test_bad_values_are_refused_without_being_quoted(store: SecretStore, value: str, why: str) -> None:
    with pytest.raises(BadInputError, match=why) as caught:
        store.set("a", value)
    assert value not in str(caught.value) or value == ""
    assert not store.path.exists()


def test_a_value_of_the_largest_size_and_any_text_is_kept(store: SecretStore) -> None:
    store.set("big", "é" * (MAX_VALUE_BYTES // 2))
    weird = 'line\nbreak "quotes" {{ RUNPOD_SECRET_x }} \\ 🗝'
    store.set("weird", weird)
    assert store.resolve("weird") == weird
    assert store.resolve("big") == "é" * (MAX_VALUE_BYTES // 2)


@pytest.mark.parametrize(
    "text",
    [
        b"not json " + VALUE.encode(),
        b"[]",
        json.dumps({"version": 2, "secrets": []}).encode(),
        json.dumps({"version": 1, "secrets": [{"name": "../x", "app": None, "value": VALUE}]}).encode(),
        json.dumps(
            {"version": 1, "secrets": [{"name": "a", "app": None, "value": 5, "created": 1, "updated": 1}]}
        ).encode(),
    ],
)
def test_a_file_not_ours_is_refused_without_quoting_it(store: SecretStore, text: bytes) -> None:
    store.root.mkdir(parents=True)
    store.path.write_bytes(text)
    with pytest.raises(ConfigError) as caught:
        store.resolve("a")
    assert VALUE not in str(caught.value)
    with pytest.raises(ConfigError):
        store.set("a", "new")
    assert store.path.read_bytes() == text  # never rewritten


def test_two_processes_writing_at_once_lose_no_change(tmp_path: Path) -> None:
    # two real processes set 40 names each into one folder at the same time: the lock keeps every change
    root = tmp_path / "secrets"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from flashpoint.hosting.secretstore import SecretStore\n"
        "store = SecretStore(Path(sys.argv[1]))\n"
        "for n in range(40):\n"
        "    store.set(f'{sys.argv[2]}{n}', 'v' * n + 'x')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root), prefix]) for prefix in ("a", "b")]
    assert [proc.wait(60) for proc in procs] == [0, 0]
    store = SecretStore(root)
    assert {info.name for info in store.list()} == {f"{p}{n}" for p in "ab" for n in range(40)}
    assert store.resolve("b39") == "v" * 39 + "x"


#: the per-app rule (decision 0085, kept by the plane in decision 0103): what is set for ``tok`` server-wide, for app
#: ``a`` and for app ``b``; the app asking (None: an endpoint of no app); what it gets
PER_APP_RULE = [
    ((None, None, None), None, None),
    ((None, None, None), "a", None),
    (("s", None, None), None, "s"),
    (("s", None, None), "a", "s"),  # the server-wide one serves every app
    ((None, "A", None), "a", "A"),
    ((None, "A", None), "b", None),  # another app never sees a's
    ((None, "A", None), None, None),  # nor does an endpoint of no app
    ((None, "A", None), "c", None),
    (("s", "A", None), "a", "A"),  # the app's own wins
    (("s", "A", None), "b", "s"),
    (("s", "A", "B"), "b", "B"),
    (("s", "A", "B"), None, "s"),
    ((None, "A", "B"), "c", None),
]


@pytest.mark.parametrize(
    ("server", "of_a", "of_b", "app", "gets"), [(*kept, app, gets) for kept, app, gets in PER_APP_RULE]
)
def test_an_endpoint_of_an_app_gets_its_apps_secret_else_the_server_wide_one(
    store: SecretStore, server: str | None, of_a: str | None, of_b: str | None, app: str | None, gets: str | None
) -> None:
    for owner, value in ((None, server), ("a", of_a), ("b", of_b)):
        if value is not None:
            store.set("tok", value, app=owner)
    assert store.resolve("tok", app=app) == gets
    assert store.resolver(app)("tok") == gets
    declared = Endpoint(name="e", gpu=GpuGroup.ANY, env={"T": Secret("tok"), "U": "{{ RUNPOD_SECRET_tok }}"}).spec
    deployed = dataclasses.replace(declared, app=app, app_env=None if app is None else "prod")
    assert store.missing(deployed) == ([] if gets is not None else ["tok"])


def test_missing_names_each_secret_once_in_the_order_first_named(store: SecretStore) -> None:
    store.set("there", "1", app="shop")
    env = {"A": Secret("gone"), "B": "{{ RUNPOD_SECRET_there }}{{ RUNPOD_SECRET_lost }}", "C": Secret("gone")}
    declared = dataclasses.replace(Endpoint(name="e", gpu=GpuGroup.ANY, env=env).spec, app="shop", app_env="prod")
    assert store.missing(declared) == ["gone", "lost"]
    assert store.missing(dataclasses.replace(declared, app="lab")) == ["gone", "there", "lost"]
    assert store.missing(Endpoint(name="plain", gpu=GpuGroup.ANY, env={"P": "x"}).spec) == []
