"""One server, named or alone (issue 22, point 6): ``target.one_server`` and the commands that use it (``flashpoint
secret``) take ``--url``, else the one ``flashpoint serve`` announced on this machine; with several they refuse and
list them instead of picking one. Announcements are real files in a tmp state dir, written by ``hosting/announce.py``
as the planes write them; the processes named are alive (this one and its parent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashpoint.cli import app
from flashpoint.cli.live import SERVER, URL
from flashpoint.cli.target import one_server
from flashpoint.config import Settings
from flashpoint.errors import ConfigError, NotFoundError
from flashpoint.hosting import announce

#: loopback ports where nothing listens: a command that picked a server says so by failing to reach that one
FIRST, SECOND = "http://127.0.0.1:9", "http://127.0.0.1:7"

runner = CliRunner()


def settings(tmp_path: Path) -> Settings:
    return Settings.load({"FLASHPOINT_STATE_DIR": str(tmp_path / "state")})


def announce_plane(tmp_path: Path, kind: str, url: str, *, pid: int | None = None, app: str | None = None) -> None:
    notice = announce.Announcement(kind, url, f"minted-{url[-1]}", pid=pid or os.getpid(), app=app)
    assert announce.write(tmp_path / "state", notice, name=url.rsplit(":", 1)[1]) is not None


def cli_env(tmp_path: Path) -> dict[str, str | None]:
    return {"FLASHPOINT_STATE_DIR": str(tmp_path / "state"), "FLASHPOINT_URL": None, "FLASHPOINT_API_KEY": None}


def test_two_announced_servers_are_refused_and_both_named(tmp_path: Path) -> None:
    announce_plane(tmp_path, announce.SERVER, FIRST, app="team-a/app.py")
    announce_plane(tmp_path, announce.SERVER, SECOND, pid=os.getppid())

    with pytest.raises(ConfigError) as refused:
        one_server(None, None, settings(tmp_path))

    message = str(refused.value)
    assert f"{FIRST} (serve team-a/app.py, pid {os.getpid()})" in message
    assert f"{SECOND} (serve (no app), pid {os.getppid()})" in message
    assert message.startswith("2 flashpoint servers run on this machine") and "pick one with --url" in message


def test_the_one_server_is_picked_and_dev_and_script_planes_do_not_count(tmp_path: Path) -> None:
    announce_plane(tmp_path, announce.DEV, "http://127.0.0.1:5", app="/home/me/project")
    announce_plane(tmp_path, announce.EMBEDDED, "http://127.0.0.1:4")
    announce_plane(tmp_path, announce.SERVER, FIRST, app="app.py")

    picked = one_server(None, None, settings(tmp_path))

    assert (picked.kind, picked.url, picked.key, picked.app, picked.pid) == (
        SERVER,
        FIRST,
        "minted-9",
        "app.py",
        os.getpid(),
    )


def test_url_names_that_server_even_among_several(tmp_path: Path) -> None:
    announce_plane(tmp_path, announce.SERVER, FIRST)
    announce_plane(tmp_path, announce.SERVER, SECOND, pid=os.getppid())

    own = one_server(SECOND + "/", None, settings(tmp_path))
    elsewhere = one_server("http://10.0.0.5:8000", "given, more", settings(tmp_path))

    assert (own.kind, own.url, own.key, own.pid) == (URL, SECOND, "minted-7", None)  # the announced key is borrowed
    assert (elsewhere.kind, elsewhere.url, elsewhere.key) == (URL, "http://10.0.0.5:8000", "given")


@pytest.mark.parametrize("bad", ["127.0.0.1:8000", "ftp://host", "\x1b]0;owned\x07"])
def test_a_url_that_is_not_http_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"must be an http\(s\) URL"):
        one_server(bad, None, settings(tmp_path))


def test_no_server_says_to_start_one_or_name_one(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as none:
        one_server(None, None, settings(tmp_path))
    assert "no `flashpoint serve` runs on this machine:" in str(none.value)
    assert "`flashpoint serve`" in str(none.value) and "--url URL (or FLASHPOINT_URL)" in str(none.value)

    announce_plane(tmp_path, announce.DEV, "http://127.0.0.1:5")
    announce_plane(tmp_path, announce.EMBEDDED, "http://127.0.0.1:4")
    with pytest.raises(NotFoundError, match="2 other flashpoint processes run here, `flashpoint dev` or scripts"):
        one_server(None, None, settings(tmp_path))


def test_secret_commands_refuse_to_pick_one_of_several_servers(tmp_path: Path) -> None:
    announce_plane(tmp_path, announce.SERVER, FIRST, app="a.py")
    announce_plane(tmp_path, announce.SERVER, SECOND, pid=os.getppid(), app="b.py")

    for args in (["secret", "list"], ["secret", "delete", "HF_TOKEN"]):
        result = runner.invoke(app, args, env=cli_env(tmp_path))
        assert result.exit_code != 0 and isinstance(result.exception, ConfigError), result.output
        assert FIRST in str(result.exception) and SECOND in str(result.exception)
    # set refuses before it asks for the value: stdin is never read
    result = runner.invoke(app, ["secret", "set", "HF_TOKEN"], input="never-read", env=cli_env(tmp_path))
    assert isinstance(result.exception, ConfigError) and "pick one with --url" in str(result.exception)


def test_secret_commands_talk_to_the_one_server_or_the_named_one(tmp_path: Path) -> None:
    announce_plane(tmp_path, announce.SERVER, FIRST)
    announce_plane(tmp_path, announce.DEV, SECOND)

    alone = runner.invoke(app, ["secret", "list"], env=cli_env(tmp_path))
    named = runner.invoke(app, ["secret", "list", "--url", SECOND], env=cli_env(tmp_path))

    # nothing listens on either port: the error names the server each command picked
    assert f"flashpoint serve (pid {os.getpid()}, {FIRST}) did not answer" in str(alone.exception)
    assert f"cannot reach a flashpoint server at {SECOND}" in str(named.exception)
