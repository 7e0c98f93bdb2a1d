"""Announcements (hosting/announce.py): one schema written and read back, private files, and a reader that refuses
what it cannot trust (with the reason) and removes what dead processes left behind."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flashpoint.hosting import announce
from flashpoint.hosting.announce import DEV, EMBEDDED, SCHEMA_VERSION, SERVER, Announcement, Refused


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def put(state: Path, name: str, body: Any) -> Path:
    """A file in the announcements' folder, as anyone might leave it there."""
    folder = state / "run"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


# --------------------------------------------------------------------------------------------------------------------
# writing and reading back


@pytest.mark.parametrize(
    ("notice", "name", "file_name"),
    [
        (Announcement(SERVER, "http://127.0.0.1:8000", None, app="app.py"), "", "{pid}-serve.json"),
        (Announcement(DEV, "http://127.0.0.1:8888", "minted", app="/home/me/project"), "", "{pid}-dev.json"),
        (Announcement(EMBEDDED, "http://127.0.0.1:4242", "script-key"), "7f00", "{pid}-embedded-7f00.json"),
    ],
)
def test_an_announcement_reads_back_as_written_from_a_private_file(
    tmp_path: Path, notice: Announcement, name: str, file_name: str
) -> None:
    state = tmp_path / "state"

    path = announce.write(state, notice, name=name)

    assert path is not None and path.name == file_name.format(pid=os.getpid())
    assert (mode(state), mode(state / "run"), mode(path)) == (0o700, 0o700, 0o600)
    assert announce.read(path) == notice
    assert json.loads(path.read_text())["version"] == SCHEMA_VERSION
    assert list((state / "run").iterdir()) == [path]  # no partial file left beside it


def test_scan_finds_the_live_announcements_oldest_first_and_withdraw_removes_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = announce.write(state, Announcement(SERVER, "http://127.0.0.1:1", None))
    second = announce.write(state, Announcement(EMBEDDED, "http://127.0.0.1:2", "k"), name="b")
    assert first is not None and second is not None
    os.utime(first, (1, 1))

    found, skipped = announce.scan(state)

    assert [(a.path, a.announcement.url) for a in found] == [
        (first, "http://127.0.0.1:1"),
        (second, "http://127.0.0.1:2"),
    ]
    assert skipped == []
    announce.withdraw(first)
    announce.withdraw(first)  # twice is fine
    announce.withdraw(None)  # nothing was written
    assert [a.path for a in announce.scan(state)[0]] == [second]


def test_an_announcement_that_cannot_be_written_is_none_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.write_text("a file where the folder should be")

    with caplog.at_level(logging.DEBUG, "flashpoint"):
        loud = announce.write(state, Announcement(SERVER, "http://127.0.0.1:1", None))
        quiet = announce.write(state, Announcement(EMBEDDED, "http://127.0.0.1:1", None), quiet=True)

    assert loud is None and quiet is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.DEBUG]
    assert "cannot announce to this machine's CLI" in caplog.records[0].getMessage()


def test_the_files_of_the_writers_before_the_schema_had_a_version_still_read(tmp_path: Path) -> None:
    pid = os.getpid()
    script = put(tmp_path, f"{pid}-1a2b.json", {"url": "http://127.0.0.1:5", "key": "k", "pid": pid})
    serve = {"pid": pid, "url": "http://127.0.0.1:6", "key": None, "kind": "server", "app": "app.py", "startedAt": 9.5}
    server = put(tmp_path, f"{pid}-serve.json", serve)

    assert announce.read(script) == Announcement(EMBEDDED, "http://127.0.0.1:5", "k", pid, None, 0.0, version=0)
    assert announce.read(server) == Announcement(SERVER, "http://127.0.0.1:6", None, pid, "app.py", 9.5, version=0)


# --------------------------------------------------------------------------------------------------------------------
# refusals


def body(**fields: Any) -> dict[str, Any]:
    """A valid announcement of this process, with ``fields`` changed (None: left out)."""
    good: dict[str, Any] = {"version": 1, "kind": "server", "pid": os.getpid(), "url": "http://127.0.0.1:8000",
                            "key": "k", "app": "app.py", "startedAt": 1.0}  # fmt: skip
    good.update(fields)
    return {name: value for name, value in good.items() if value is not None}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{half-written", "not JSON"),
        ("[1, 2]", "not a JSON object but list"),
        (body(pid=None), "no 'pid'"),
        (body(url=None), "no 'url'"),
        (body(kind="miner"), "kind must be one of server, dev, embedded, got 'miner'"),
        (body(kind=None), "kind must be one of"),  # a versioned file names its kind
        (body(version=2), "written by a newer flashpoint (schema 2"),
        (body(version="1"), "version must be a whole number"),
        (body(pid=True), "pid must be a positive whole number"),
        (body(pid=-4), "pid must be a positive whole number"),
        (body(url="file:///etc/passwd"), "url must be an http(s) URL"),
        (body(url=["http://x"]), "url must be an http(s) URL"),
        (body(key={"a": 1}), "key must be a string or null"),
        (body(app=3), "app must be a string or null"),
        (body(startedAt="yesterday"), "startedAt must be a number"),
    ],
)
def test_a_file_that_is_not_an_announcement_is_refused_with_the_reason_and_kept_while_its_writer_lives(
    tmp_path: Path, content: Any, reason: str
) -> None:
    path = put(tmp_path, f"{os.getpid()}-serve.json", content)

    with pytest.raises(Refused) as refused:
        announce.read(path)
    found, skipped = announce.scan(tmp_path)

    assert reason in str(refused.value)
    assert found == [] and [(s.path, s.reason) for s in skipped] == [(path, str(refused.value))]
    assert path.exists()


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    real = announce.write(tmp_path / "elsewhere", Announcement(SERVER, "http://127.0.0.1:1", "k"))
    assert real is not None
    link = tmp_path / "state" / "run" / f"{os.getpid()}-serve.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)

    found, skipped = announce.scan(tmp_path / "state")

    assert found == [] and [s.path for s in skipped] == [link] and skipped[0].reason.startswith("unreadable")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "run" / f"{os.getpid()}-serve.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)

    with pytest.raises(Refused, match="not a regular file"):
        announce.read(fifo)


def test_a_file_larger_than_an_announcement_can_be_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(
        json.dumps({"kind": SERVER, "pid": os.getpid(), "url": "http://x", "pad": "x" * announce.MAX_BYTES})
    )

    with pytest.raises(Refused, match="larger than"):
        announce.read(path)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="giving a file away takes root")
def test_another_users_file_is_refused(tmp_path: Path) -> None:
    path = announce.write(tmp_path, Announcement(SERVER, "http://127.0.0.1:1", "k"))
    assert path is not None
    os.chown(path, 65534, 65534)

    with pytest.raises(Refused, match=r"owned by another user \(uid 65534\)"):
        announce.read(path)


def test_what_dead_processes_left_is_removed(tmp_path: Path) -> None:
    dead = dead_pid()
    stale = put(tmp_path, f"{dead}-serve.json", body(pid=dead))
    garbage = put(tmp_path, f"{dead}-embedded-1.json", "{half-written")
    live = announce.write(tmp_path, Announcement(DEV, "http://127.0.0.1:3", None))

    found, skipped = announce.scan(tmp_path)

    assert [a.path for a in found] == [live] and skipped == []
    assert not stale.exists() and not garbage.exists()


def test_no_folder_is_no_announcement(tmp_path: Path) -> None:
    assert announce.scan(tmp_path / "nowhere") == ([], [])
