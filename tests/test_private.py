"""What flashpoint keeps for this user only (flashpoint/private.py): the state folder 0700, the job store's folder 0700
and its files (``jobs.db``, ``-wal``, ``-shm``) 0600, with real folders, a real SQLite store and real announcements.
Reading them as another user is tests/hardening/test_other_user.py."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flashpoint.config import Settings
from flashpoint.environments import EnvironmentCache
from flashpoint.hosting import announce
from flashpoint.hosting.embedded import EmbeddedServer
from flashpoint.jobs import Job
from flashpoint.private import private_dir, private_file
from flashpoint.store.sqlite import SQLiteJobStore
from tests.environments.test_cache import lay_out


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(autouse=True)
def _usual_umask() -> Iterator[None]:
    """The umask most users have (0022), which would leave new folders 0755 and files 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_private_folder_is_made_0700_with_its_missing_parents(tmp_path: Path) -> None:
    private_dir(tmp_path / "a" / "b" / ".flashpoint", ours=True)
    assert mode(tmp_path / "a" / "b" / ".flashpoint") == 0o700 and mode(tmp_path / "a") == 0o755


def test_an_existing_folder_of_flashpoints_own_is_made_private_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ours, theirs = tmp_path / ".flashpoint", tmp_path / "data"
    for folder in (ours, theirs):
        folder.mkdir()
        os.chmod(folder, 0o755)
    with caplog.at_level(logging.WARNING, "flashpoint"):
        private_dir(ours, ours=True)
        private_dir(theirs, ours=False)
    assert mode(ours) == 0o700 and f"made the folder {ours} private (mode 0700, was 0755)" in caplog.text
    assert mode(theirs) == 0o755 and str(theirs) not in caplog.text  # a folder the user chose is left as it is


def test_a_private_file_is_made_0600_and_an_existing_one_tightened_never_through_a_link(tmp_path: Path) -> None:
    private_file(tmp_path / "new")
    assert mode(tmp_path / "new") == 0o600
    old = tmp_path / "old"
    old.write_text("x")
    private_file(old)
    assert mode(old) == 0o600 and old.read_text() == "x"
    target = tmp_path / "target"
    target.write_text("")
    (tmp_path / "link").symlink_to(target)
    private_file(tmp_path / "link")
    assert mode(target) == 0o644


def test_the_job_store_is_private(tmp_path: Path) -> None:
    # Given a job store in its default folder, .flashpoint under the working directory
    path = tmp_path / ".flashpoint" / "jobs.db"
    store = SQLiteJobStore(path)
    job = Job(id="j1", endpoint="e", input={"secret": "s3cret"})
    store.add(job)
    store.flush()
    # Then only this user may read the folder and every file SQLite made (the WAL holds the job before a checkpoint)
    assert mode(path.parent) == 0o700
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["jobs.db", "jobs.db-shm", "jobs.db-wal"]
    assert {name: mode(path.parent / name) for name in files} == dict.fromkeys(files, 0o600)
    store.close()


def test_an_older_job_store_is_made_private(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given a store an older flashpoint made world-readable, in a folder the user chose
    folder = tmp_path / "data"
    store = SQLiteJobStore(folder / "jobs.db")
    store.add(Job(id="j1", endpoint="e", input={}))
    store.flush()
    store.close()
    os.chmod(folder, 0o755)
    os.chmod(folder / "jobs.db", 0o644)
    # When it is opened again
    with caplog.at_level(logging.WARNING, "flashpoint"):
        SQLiteJobStore(folder / "jobs.db").close()
    # Then its file is 0600 (said once), and the user's folder is left as it is
    assert mode(folder / "jobs.db") == 0o600 and "made the file" in caplog.text
    assert mode(folder) == 0o755


def test_announcements_live_in_a_private_state_folder(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = announce.write(state, announce.Announcement(announce.SERVER, "http://127.0.0.1:1", "minted", app="app.py"))
    assert path is not None
    assert (mode(state), mode(state / "run"), mode(path)) == (0o700, 0o700, 0o600)


def test_an_embedded_planes_state_folder_is_private(
    make_embedded: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    make_embedded("NVIDIA_H200:1")
    state = Settings.load(env={"FLASHPOINT_STATE_DIR": str(tmp_path / "state")}).state_dir
    (announcement,) = (state / "run").glob("*.json")
    assert (mode(state), mode(state / "run"), mode(announcement)) == (0o700, 0o700, 0o600)


def test_the_default_environment_cache_keeps_the_state_folder_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given ~/.flashpoint made 0755 (by an older flashpoint) holding an environment of the default cache
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FLASHPOINT_ENV_DIR")
    cache = EnvironmentCache(pip_config={})
    assert cache.root == tmp_path / ".flashpoint" / "envs"
    lay_out(cache, ["six==1.16.0"], last_used=0.0)
    assert mode(tmp_path / ".flashpoint") == 0o755
    # When an endpoint's environment is asked for
    cache.ensure(["six==1.16.0"], endpoint="a")
    # Then the state folder is made private
    assert mode(tmp_path / ".flashpoint") == 0o700
