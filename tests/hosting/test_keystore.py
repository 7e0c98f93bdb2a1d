"""The server's key store (``hosting/keystore.py``): a token is shown once and stored only as its SHA-256, in a private
file written whole under a lock; lookups compare hashes; hostile names and files not ours are refused."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flashpoint.errors import BadInputError, ConfigError, ConflictError
from flashpoint.hosting.keystore import TOKEN_PREFIX, KeyInfo, KeyStore, new_token
from tests.hosting.test_secretstore import Ticks


@pytest.fixture
def store(tmp_path: Path) -> KeyStore:
    return KeyStore(tmp_path / "data" / "keys", now=Ticks())


def test_create_lookup_list_revoke(store: KeyStore) -> None:
    info, token = store.create("ci", scope="deploy", app="shop", env="staging", by="server")
    assert info == KeyInfo("ci", "deploy", "shop", "staging", 1001.0, "server")
    assert token.startswith(TOKEN_PREFIX) and len(token) == len(TOKEN_PREFIX) + 43
    assert store.lookup(token) == info
    admin, admin_token = store.create("root", scope="admin", by="ci")
    assert admin.app is None and admin.env is None and admin.created_by == "ci"
    assert store.lookup(admin_token) == admin and admin_token != token
    assert [i.name for i in store.list()] == ["ci", "root"]
    assert store.revoke("ci") is True
    assert store.lookup(token) is None  # a revoked token opens nothing
    assert store.revoke("ci") is False
    assert store.lookup(admin_token) == admin


@pytest.mark.parametrize(
    "guess",
    ["", "fpk_", "nope", TOKEN_PREFIX + "x" * 43, "\udc80", "fpk_\udc80", "fpk_\0", 5, None, b"fpk_abc"],
)
def test_wrong_tokens_open_nothing(store: KeyStore, guess: object) -> None:
    _, token = store.create("a", scope="invoke", by="server")
    assert store.lookup(guess) is None  # type: ignore[arg-type]
    assert (
        store.lookup(token[:-1]) is None and store.lookup(token + "x") is None and store.lookup(token.upper()) is None
    )


def test_the_file_holds_hashes_never_tokens_and_nothing_shows_one(store: KeyStore) -> None:
    tokens = [store.create(f"k{n}", scope=scope, by="server")[1] for n, scope in enumerate(("admin", "invoke"))]
    text = store.path.read_text()
    for token in tokens:
        assert token not in text and token.removeprefix(TOKEN_PREFIX) not in text
        assert hashlib.sha256(token.encode()).hexdigest() in text
    shown = repr(store) + repr(store.list()) + repr([store.lookup(t) for t in tokens])
    assert not any(t in shown or hashlib.sha256(t.encode()).hexdigest() in shown for t in tokens)


def test_the_file_and_folder_are_private_and_hold_no_leftovers(store: KeyStore) -> None:
    store.create("a", scope="invoke", app="shop", by="server")
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert sorted(p.name for p in store.root.iterdir()) == ["keys.json", "lock"]


def test_a_reopened_store_keeps_every_key_and_a_second_handle_sees_changes(store: KeyStore) -> None:
    _, token = store.create("a", scope="invoke", app="shop", by="server")
    other = KeyStore(store.root)
    assert other.lookup(token) is not None
    other.create("b", scope="deploy", by="server")
    assert [i.name for i in store.list()] == ["a", "b"]
    assert store.revoke("a") is True
    assert other.lookup(token) is None  # the first handle's cached read is dropped when the file changes


def test_a_duplicate_name_says_what_to_do(store: KeyStore) -> None:
    _, token = store.create("ci", scope="invoke", by="server")
    with pytest.raises(ConflictError, match=r"revoke it first .*or pick another name"):
        store.create("ci", scope="admin", by="server")
    assert store.lookup(token) is not None and store.list()[0].scope == "invoke"


@pytest.mark.parametrize(
    ("name", "scope", "app", "env", "why"),
    [
        ("", "invoke", None, None, "key's name"),
        ("../etc/passwd", "invoke", None, None, "key's name"),
        ("a/b", "invoke", None, None, "key's name"),
        (".hidden", "invoke", None, None, "key's name"),
        ("-flag", "invoke", None, None, "key's name"),
        ("with space", "invoke", None, None, "key's name"),
        ("nul\0", "invoke", None, None, "key's name"),
        ("é", "invoke", None, None, "key's name"),
        ("a" * 64, "invoke", None, None, "key's name"),
        ("server", "admin", None, None, "server's own keys"),
        ("ok", "root", None, None, "scope"),
        ("ok", "ADMIN", None, None, "scope"),
        ("ok", "", None, None, "scope"),
        ("ok", "invoke", "../x", None, "app's name"),
        ("ok", "invoke", "a.b", None, "app's name"),
        ("ok", "invoke", "", None, "app's name"),
        ("ok", "invoke", "a" * 64, None, "app's name"),
        ("ok", "invoke", "shop", "pro/d", "env's name"),
        ("ok", "invoke", None, "prod", "name the app too"),
        ("ok", "admin", "shop", None, "whole server"),
        ("ok", "admin", None, "prod", "whole server"),
    ],
)
def test_hostile_and_impossible_keys_are_refused(
    store: KeyStore, name: str, scope: str, app: str | None, env: str | None, why: str
) -> None:
    with pytest.raises(BadInputError, match=why):
        store.create(name, scope=scope, app=app, env=env, by="server")
    assert not store.path.exists()


@pytest.mark.parametrize("name", ["a", "A" * 63, "ci.deploy_2-x", "9lives"])
def test_good_names(store: KeyStore, name: str) -> None:
    info, token = store.create(name, scope="invoke", app="a" * 63, env="prod-1", by="server")
    assert store.lookup(token) == info


@pytest.mark.parametrize("name", ["../x", "", "a" * 300, "nul\0"])
def test_revoking_a_hostile_name_is_no_key(store: KeyStore, name: str) -> None:
    store.create("a", scope="invoke", by="server")
    assert store.revoke(name) is False
    assert [i.name for i in store.list()] == ["a"]


GOOD = {"name": "a", "scope": "invoke", "app": None, "env": None, "created": 1.0, "created_by": "x", "sha256": "0" * 64}


@pytest.mark.parametrize(
    "text",
    [
        b"not json",
        b"[]",
        json.dumps({"version": 2, "keys": []}).encode(),
        json.dumps({"keys": []}).encode(),
        json.dumps({"version": 1, "keys": [{**GOOD, "name": "../x"}]}).encode(),
        json.dumps({"version": 1, "keys": [{**GOOD, "scope": "root"}]}).encode(),
        json.dumps({"version": 1, "keys": [{**GOOD, "sha256": "fpk_plain-token"}]}).encode(),
        json.dumps({"version": 1, "keys": [{**GOOD, "created": "soon"}]}).encode(),
        json.dumps({"version": 1, "keys": [GOOD, GOOD]}).encode(),
        json.dumps({"version": 1, "keys": [{k: v for k, v in GOOD.items() if k != "sha256"}]}).encode(),
    ],
)
def test_a_file_not_ours_is_refused_and_never_rewritten(store: KeyStore, text: bytes) -> None:
    store.root.mkdir(parents=True)
    store.path.write_bytes(text)
    for act in (store.list, lambda: store.lookup(new_token()), lambda: store.revoke("a")):
        with pytest.raises(ConfigError, match="not one this flashpoint wrote"):
            act()
    with pytest.raises(ConfigError):
        store.create("b", scope="invoke", by="server")
    assert store.path.read_bytes() == text


def test_a_good_file_written_by_hand_is_read(store: KeyStore) -> None:
    # the format is what the decision says: the SHA-256 of the token, hex
    token = new_token()
    store.root.mkdir(parents=True)
    store.path.write_text(
        json.dumps({"version": 1, "keys": [{**GOOD, "sha256": hashlib.sha256(token.encode()).hexdigest()}]})
    )
    assert store.lookup(token) == KeyInfo("a", "invoke", None, None, 1.0, "x")


def test_two_processes_writing_at_once_lose_no_key(tmp_path: Path) -> None:
    # two real processes create 30 keys each in one folder at the same time: the lock keeps every one
    root = tmp_path / "keys"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from flashpoint.hosting.keystore import KeyStore\n"
        "store = KeyStore(Path(sys.argv[1]))\n"
        "for n in range(30):\n"
        "    _, token = store.create(f'{sys.argv[2]}{n}', scope='invoke', by='test')\n"
        "    print(token)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(root), prefix], stdout=subprocess.PIPE, text=True)
        for prefix in ("a", "b")
    ]
    outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    store = KeyStore(root)
    assert {info.name for info in store.list()} == {f"{p}{n}" for p in "ab" for n in range(30)}
    for prefix, output in zip("ab", outputs, strict=True):
        tokens = output.split()
        assert [store.lookup(t).name for t in tokens] == [f"{prefix}{n}" for n in range(30)]  # type: ignore[union-attr]


def test_a_lookup_compares_with_every_key_whichever_matches(store: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # no early exit: the first key's token, the last one's and a wrong one each cost one comparison per stored key
    # (a spy on hmac.compare_digest, which still does the comparing)
    import hmac

    tokens = [store.create(f"k{n}", scope="invoke", by="server")[1] for n in range(5)]
    real = hmac.compare_digest
    calls: list[int] = []

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for token in (tokens[0], tokens[-1], new_token()):
        calls.clear()
        store.lookup(token)
        assert len(calls) == 5
