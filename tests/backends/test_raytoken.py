"""The token of the one-node Ray flashpoint starts is readable by this user alone (backends/raytoken.py; issue 20
point 3): Ray 2.59+ would write it 0644 in a 0755 ~/.ray, where any local user could read it and run code in our Ray."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from flashpoint.backends.raytoken import keep_private, token_file


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("home/.ray/auth_token", True)),
        ({"RAY_AUTH_MODE": "token"}, ("home/.ray/auth_token", True)),
        ({"RAY_AUTH_MODE": "Disabled"}, None),
        ({"RAY_AUTH_TOKEN": "abc"}, None),
        ({"RAY_AUTH_TOKEN": "  "}, ("home/.ray/auth_token", True)),
        ({"RAY_AUTH_TOKEN_PATH": "/etc/ray/token"}, ("/etc/ray/token", False)),
    ],
)
def test_which_token_file_a_new_local_ray_uses(env: dict[str, str], expected: tuple[str, bool] | None) -> None:
    found = token_file(env, Path("home"))
    assert (None if found is None else (str(found[0]), found[1])) == expected


def test_a_missing_token_is_written_private_in_a_private_folder(tmp_path: Path) -> None:
    path = keep_private({}, tmp_path)
    assert path == tmp_path / ".ray" / "auth_token"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0  # Ray's form: 256 bits as hex
    assert keep_private({}, tmp_path) == path and path.read_text() == token  # never replaced


def test_an_existing_readable_token_is_made_private_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / ".ray"
    folder.mkdir(mode=0o755)
    path = folder / "auth_token"
    path.write_text("f" * 64)
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="flashpoint"):
        keep_private({}, tmp_path)
    assert mode(path) == 0o600 and path.read_text() == "f" * 64
    assert mode(folder) == 0o755  # the user's own folder is left as it is: the file is what holds the secret
    assert "made the file" in caplog.text and str(path) in caplog.text


def test_a_named_token_file_is_made_private_but_never_made(tmp_path: Path) -> None:
    named = tmp_path / "cluster-token"
    assert keep_private({"RAY_AUTH_TOKEN_PATH": str(named)}, tmp_path) == named
    assert not named.exists() and not (tmp_path / ".ray").exists()  # Ray reads it and never makes it
    named.write_text("a" * 64)
    named.chmod(0o640)
    keep_private({"RAY_AUTH_TOKEN_PATH": str(named)}, tmp_path)
    assert mode(named) == 0o600


def test_nothing_is_written_when_no_file_is_involved(tmp_path: Path) -> None:
    assert keep_private({"RAY_AUTH_MODE": "disabled"}, tmp_path) is None
    assert keep_private({"RAY_AUTH_TOKEN": "x" * 64}, tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_a_link_in_the_tokens_place_is_neither_followed_nor_changed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not a token")
    target.chmod(0o644)
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").symlink_to(target)
    keep_private({}, tmp_path)
    assert mode(target) == 0o644 and target.read_text() == "not a token"
