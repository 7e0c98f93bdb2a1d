"""Which lease directories and lock files a process trusts (scheduler/leasetrust.py, used by scheduler/leases.py):
the decisions by tables, then real directories and files: a directory others may write without the sticky bit, one
that cannot be made, links, FIFOs, hard links and planted files in a lock file's place. Where the suite runs as
root, files and directories are handed to user ``nobody`` to stand for another user's (the two-user attacks with
real processes are tests/hardening/test_other_user.py)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from flashpoint.explain import LEASE_DIRECTORY, LOCK_FILE, OtherProcess
from flashpoint.scheduler.ownership.leases import DeviceLeases, identity, prepare
from flashpoint.scheduler.ownership.leasetrust import directory_problem, lock_file_problem, refusal
from tests.scheduler.ownership.test_leases import device, me

DIR, REG, LNK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK
ME, OTHER = 1000, 1001
as_root = pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="handing files to nobody needs root")
NOBODY = 65534


@pytest.mark.parametrize(
    ("mode", "uid", "problem"),
    [
        (DIR | 0o1777, 0, None),  # root's, sticky: the default made by root
        (DIR | 0o1777, ME, None),  # this user's, sticky: the default made by this user
        (DIR | 0o700, ME, None),  # private
        (DIR | 0o755, ME, None),
        (DIR | 0o755, 0, None),  # root's, nobody else writes it
        (DIR | 0o1770, ME, None),  # group-writable, sticky
        (DIR | 0o1777, OTHER, "belongs to user"),  # another user's: its owner may delete anyone's lock files
        (DIR | 0o700, OTHER, "belongs to user"),
        (DIR | 0o777, 0, "without the sticky bit"),
        (DIR | 0o777, ME, "without the sticky bit"),
        (DIR | 0o775, ME, "without the sticky bit"),
        (DIR | 0o757, ME, "without the sticky bit"),
        (LNK | 0o777, ME, "symbolic link"),
        (REG | 0o644, ME, "not a directory"),
    ],
)
def test_directory_problem(mode: int, uid: int, problem: str | None) -> None:
    found = directory_problem("/tmp/flashpoint-devices", mode=mode, uid=uid, own_uid=ME)
    assert (found is None) if problem is None else (found is not None and problem in found), found
    if found is not None and uid == OTHER:
        assert f"(uid {OTHER})" in found and f"mode {stat.S_IMODE(mode):04o}" in found


@pytest.mark.parametrize(
    ("mode", "uid", "nlink", "private", "problem"),
    [
        (REG | 0o666, ME, 1, False, None),
        (REG | 0o666, OTHER, 1, False, None),  # another user's lock file in the shared directory
        (REG | 0o666, 0, 1, True, None),  # root's, in a private directory
        (REG | 0o644, ME, 1, False, None),  # this user's own: made 0666 by the caller
        (REG | 0o600, OTHER, 1, False, "mode 0600"),  # planted to keep this user out
        (REG | 0o644, OTHER, 1, False, "mode 0644"),
        (REG | 0o666, OTHER, 1, True, "only its owner may write"),
        (REG | 0o666, ME, 2, False, "2 names"),  # a hard link: another file's data (and mode) behind it
        (LNK | 0o777, OTHER, 1, False, "symbolic link"),
        (DIR | 0o777, OTHER, 2, False, "not a regular file"),
        (stat.S_IFIFO | 0o666, OTHER, 1, False, "not a regular file"),
    ],
)
def test_lock_file_problem(mode: int, uid: int, nlink: int, private: bool, problem: str | None) -> None:
    found = lock_file_problem(mode, uid, nlink, own_uid=ME, private=private)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_refusal_says_what_to_do() -> None:
    words = refusal("X belongs to user eve (uid 1001)", path="/tmp/flashpoint-devices", default=True, judged=True)
    assert "sudo chown root:root /tmp/flashpoint-devices" in words and "FLASHPOINT_LEASE_DIR" in words
    assert "leases no device there" in words
    other = refusal("cannot make the lease directory /x: denied", path="/x", default=False, judged=False)
    assert "chown" not in other and "FLASHPOINT_LEASE_DIR" in other


# ----------------------------------------------------------------------------------------------------------------
# real directories


def test_a_directory_others_may_write_without_the_sticky_bit_holds_every_device(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "leases"
    root.mkdir()
    os.chmod(root, 0o777)
    leases = DeviceLeases(me(), root)
    names = [n for n in (identity(device(index=i)) for i in (0, 1)) if n is not None]
    assert len(names) == 2
    with caplog.at_level(logging.WARNING, "flashpoint.plane"):
        held = [leases.acquire(n, device(index=i), "infer", "w1") for i, n in enumerate(names)]
    # both devices are held by the directory, named in words that say why and what to do; nothing was made there
    assert held[0] is not None and held[0] == held[1] and held[0].kind == LEASE_DIRECTORY
    assert held[0].label.startswith(f"an untrusted lease directory ({root} (user ")
    assert "mode 0777" in held[0].label and "FLASHPOINT_LEASE_DIR" in held[0].label
    assert list(root.iterdir()) == [] and leases.held() == ()
    assert caplog.text.count("device leases:") == 1  # warned once
    # the plane's recheck hears the same holder (the device stays held), until the directory is fixed
    assert leases.holders(names) == dict.fromkeys(names, held[0])
    os.chmod(root, 0o1777)
    assert leases.holders(names) == dict.fromkeys(names)
    assert leases.acquire(names[0], device(), "infer", "w1") is None
    leases.close()


def test_a_directory_that_cannot_be_made_holds_every_device_until_it_can(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    leases = DeviceLeases(me(), blocker / "leases")
    name = identity(device())
    assert name is not None
    held = leases.acquire(name, device(), "infer", "w1")
    assert held is not None and held.kind == LEASE_DIRECTORY and "cannot make the lease directory" in held.label
    assert leases.holder(name) == held  # not "free again" at every recheck
    blocker.unlink()
    blocker.mkdir()
    assert leases.holder(name) is None and (blocker / "leases").is_dir()
    assert leases.acquire(name, device(), "infer", "w1") is None
    leases.close()


def test_a_reader_makes_no_directory(tmp_path: Path) -> None:
    leases = DeviceLeases(me(), tmp_path / "missing")
    assert leases.holders(["a", "b"]) == {"a": None, "b": None}
    assert not (tmp_path / "missing").exists()


@as_root
def test_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "leases"
    prepare(root, shared=True)
    os.chown(root, NOBODY, NOBODY)
    held = DeviceLeases(me(), root).acquire("dev", device(), "infer", "w1")
    assert held is not None and held.kind == LEASE_DIRECTORY
    assert f"belongs to user nobody (uid {NOBODY}), mode 1777" in held.label
    assert list(root.iterdir()) == []


# ----------------------------------------------------------------------------------------------------------------
# real lock files that are not lock files


def _leases(tmp_path: Path) -> tuple[DeviceLeases, Path, str]:
    root = tmp_path / "leases"
    prepare(root, shared=True)
    name = identity(device())
    assert name is not None
    return DeviceLeases(me(), root), root, name


def _held_by_a_file(found: OtherProcess | None, uid: int, problem: str) -> None:
    assert found is not None and found.kind == LOCK_FILE and found.uid == uid and problem in found.label, found


def test_a_link_in_place_of_a_lock_file_holds_that_device_only(tmp_path: Path) -> None:
    leases, root, name = _leases(tmp_path)
    target = tmp_path / "victim"
    target.write_text("keep")
    (root / f"{name}.lock").symlink_to(target)
    found = leases.acquire(name, device(), "infer", "w1")
    _held_by_a_file(found, os.getuid(), "is a symbolic link")
    assert found is not None and found.label.startswith(f"this user (uid {os.getuid()}): {root / name}.lock is")
    assert leases.holder(name) == found and target.read_text() == "keep"
    # another device is leased as ever: leases are not "off"
    other = identity(device(index=1))
    assert other is not None and leases.acquire(other, device(index=1), "infer", "w2") is None
    leases.close()


def test_a_fifo_in_place_of_a_lock_file_holds_that_device_and_blocks_nobody(tmp_path: Path) -> None:
    leases, root, name = _leases(tmp_path)
    os.mkfifo(root / f"{name}.lock", 0o666)
    _held_by_a_file(leases.acquire(name, device(), "infer", "w1"), os.getuid(), "not a regular file")
    _held_by_a_file(leases.holder(name), os.getuid(), "not a regular file")


def test_a_hard_link_in_place_of_a_lock_file_is_not_written_nor_made_0666(tmp_path: Path) -> None:
    leases, root, name = _leases(tmp_path)
    precious = tmp_path / "precious"
    precious.write_text("secret")
    os.chmod(precious, 0o600)
    os.link(precious, root / f"{name}.lock")
    _held_by_a_file(leases.acquire(name, device(), "infer", "w1"), os.getuid(), "2 names")
    assert precious.read_text() == "secret" and stat.S_IMODE(precious.stat().st_mode) == 0o600


def test_this_users_own_lock_file_of_another_mode_is_made_0666_and_leased(tmp_path: Path) -> None:
    leases, root, name = _leases(tmp_path)
    path = root / f"{name}.lock"
    path.write_text("")
    os.chmod(path, 0o644)
    assert leases.acquire(name, device(), "infer", "w1") is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o666
    leases.close()


@as_root
def test_a_lock_file_another_user_planted_0600_holds_that_device_for_that_user(tmp_path: Path) -> None:
    leases, root, name = _leases(tmp_path)
    path = root / f"{name}.lock"
    path.write_text("")
    os.chmod(path, 0o600)
    os.chown(path, NOBODY, NOBODY)
    found = leases.acquire(name, device(), "infer", "w1")
    _held_by_a_file(found, NOBODY, "mode 0600")
    assert found is not None and found.label.startswith(f"another user (uid {NOBODY}, nobody): ")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # left as it is


@as_root
def test_a_lock_file_its_owner_deletes_under_a_held_lease_is_leased_again(tmp_path: Path) -> None:
    # Given a lease held through a good lock file (0666) of another user, who deletes it while it is held
    leases, root, name = _leases(tmp_path)
    path = root / f"{name}.lock"
    path.write_text("")
    os.chmod(path, 0o666)
    os.chown(path, NOBODY, NOBODY)
    assert leases.acquire(name, device(), "infer", "w1") is None
    assert leases.recheck_files() == []  # still in place: nothing to say
    path.unlink()
    # Then the next recheck leases it again through a new file of this user's, which the next process finds held
    (note,) = leases.recheck_files()
    assert f"a lock file of user nobody (uid {NOBODY}), was deleted or replaced" in note and "leased again" in note
    assert path.stat().st_uid == os.getuid() and leases.held() == (name,)
    later = DeviceLeases(me(), root)
    found = later.acquire(name, device(), "later", "w2")
    assert found is not None and found.endpoint == "infer"
    # and had another process taken the new file first, the recheck says who (both may use the device)
    leases.close()
    path.unlink()
    path.write_text("")
    os.chmod(path, 0o666)
    os.chown(path, NOBODY, NOBODY)
    assert leases.acquire(name, device(), "infer", "w1") is None
    path.unlink()
    assert later.acquire(name, device(), "later", "w2") is None
    (note,) = leases.recheck_files()
    assert "both may use it" in note and "endpoint later" in note and leases.held() == (name,)
    later.close()
    leases.close()


def test_lock_files_of_this_user_are_not_looked_at_again(tmp_path: Path) -> None:
    leases, root, name = _leases(tmp_path)
    assert leases.acquire(name, device(), "infer", "w1") is None
    (root / f"{name}.lock").unlink()  # only this user (or root) could: nothing is checked for its own files
    assert leases.recheck_files() == []
    leases.close()
