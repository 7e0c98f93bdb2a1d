"""Want marks (scheduler/wants.py): a plane waiting for a device another process holds marks it; the holder reads
the marks on its devices. Real files in a temporary lease directory; the other process is a real child where its
pid must be alive, or this process (another plane of it) where the test needs to steer both sides."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashpoint.scheduler.ownership import kernel, wants
from flashpoint.scheduler.ownership.leases import Owner, prepare
from flashpoint.scheduler.ownership.wants import FRESH_S, WantMarks
from tests.scheduler.ownership.test_leases import device

DEVICE = device()
NAME = "sim-node-a-NVIDIA_H200-0-0123456789ab"


def owner(pid: int | None = None, kind: str = "script") -> Owner:
    """Process ``pid`` (this one by default) as its planes name themselves: its start time is the kernel's."""
    pid = pid or os.getpid()
    return Owner(pid, 1.0, kind, f"{kind} app.py", "http://127.0.0.1:9", kernel.process_ticks(pid))


def plane(root: Path, pid: int | None = None, kind: str = "script") -> WantMarks:
    """The marks of a plane of process ``pid`` (this one by default)."""
    prepare(root, shared=False)
    return WantMarks(owner(pid, kind), root)


def test_a_mark_names_the_wanter_and_its_endpoint_and_is_withdrawn_when_no_longer_wanted(tmp_path: Path) -> None:
    wanter, holder = plane(tmp_path), plane(tmp_path, kind="flashpoint serve")
    wanter.mark({NAME: (DEVICE, "mine")})
    (path,) = tmp_path.glob(f"{NAME}.want-*")
    assert (
        path.name == f"{NAME}.want-{os.getpid()}-{wanter.token}" and json.loads(path.read_text())["endpoint"] == "mine"
    )
    (found,) = holder.wanters({NAME}).values()
    assert (found.pid, found.endpoint, found.kind, found.same_process) == (os.getpid(), "mine", "script", True)
    # a plane never reads its own marks, nor marks on devices it does not name
    assert wanter.wanters({NAME}) == {} and holder.wanters({"another-device"}) == {}
    wanter.mark({})
    assert list(tmp_path.glob("*.want-*")) == [] and holder.wanters({NAME}) == {} and wanter.marked() == ()


def test_a_kept_mark_is_refreshed_and_a_stale_one_is_read_as_withdrawn(tmp_path: Path) -> None:
    wanter, holder = plane(tmp_path), plane(tmp_path)
    wanter.mark({NAME: (DEVICE, "mine")})
    (path,) = tmp_path.glob(f"{NAME}.want-*")
    old = time.time() - FRESH_S - 1
    os.utime(path, (old, old))
    assert holder.wanters({NAME}) == {}  # not refreshed for FRESH_S: withdrawn
    wanter.mark({NAME: (DEVICE, "mine")})  # the next recheck refreshes it
    assert path.stat().st_mtime > old + 1 and set(holder.wanters({NAME})) == {NAME}


def test_marks_go_when_the_plane_closes(tmp_path: Path) -> None:
    wanter = plane(tmp_path)
    wanter.mark({NAME: (DEVICE, "mine"), "other": (DEVICE, "mine")})
    assert len(list(tmp_path.glob("*.want-*"))) == 2
    wanter.close()
    assert list(tmp_path.glob("*.want-*")) == []


def test_a_mark_of_a_dead_process_is_nobody_and_is_removed(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = plane(tmp_path, pid=int(finished.stdout))
    dead.mark({NAME: (DEVICE, "gone")})
    dead._marks.clear()  # as if the process died without withdrawing it
    assert plane(tmp_path).wanters({NAME}) == {}
    assert list(tmp_path.glob("*.want-*")) == []


def test_a_mark_of_a_live_child_process_is_read(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        theirs = plane(tmp_path, pid=child.pid)  # (held: a plane's marks go when it is collected)
        theirs.mark({NAME: (DEVICE, "theirs")})
        (found,) = plane(tmp_path).wanters({NAME}).values()
        assert (found.pid, found.endpoint, found.same_process) == (child.pid, "theirs", False)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


def test_what_is_not_a_mark_is_ignored(tmp_path: Path) -> None:
    holder = plane(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"pid": os.getpid(), "endpoint": "link"}))
    (tmp_path / f"{NAME}.want-{os.getpid()}-link").symlink_to(outside)  # a link is never followed
    (tmp_path / f"{NAME}.want-{os.getpid()}-dir").mkdir()  # not a file
    (tmp_path / f"{NAME}.want-notapid-x").write_text("{}")
    (tmp_path / f"{NAME}.want-0-x").write_text(json.dumps({"pid": 0}))
    (tmp_path / f"{NAME}.want-{os.getpid()}-torn").write_text('{"pid": ')  # half written: nobody yet
    assert holder.wanters({NAME}) == {}


def test_the_marks_folder_is_made_at_the_first_mark_in_the_lease_directory_only(tmp_path: Path) -> None:
    lease_dir = tmp_path / "leases"
    wanter = WantMarks(owner(), lease_dir / "wants")
    wanter.mark({NAME: (DEVICE, "mine")})
    # no lease directory yet: the leases make it, with its mode; marks make nothing and do nothing
    assert wanter.marked() == () and wanter.wanters({NAME}) == {} and not lease_dir.exists()
    prepare(lease_dir, shared=False)
    wanter.mark({NAME: (DEVICE, "mine")})
    assert wanter.marked() == (NAME,) and [p.parent.name for p in lease_dir.rglob("*.want-*")] == ["wants"]
    assert set(plane(lease_dir / "wants").wanters({NAME})) == {NAME}


def test_the_scan_of_the_shared_directory_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(5):  # a directory filled by someone else
        (tmp_path / f"junk-{n}").write_text("")
    monkeypatch.setattr(wants, "MAX_ENTRIES", 3)
    assert len(wants._entries(tmp_path)) == 3
    monkeypatch.setattr(wants, "MAX_ENTRIES", 100)
    assert len(wants._entries(tmp_path)) == 5
    assert wants._entries(tmp_path / "missing") == []


def test_the_marks_folder_is_shared_when_the_lease_directory_is(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        for name, shared in (("shared", True), ("private", False)):
            lease_dir = tmp_path / name
            prepare(lease_dir, shared=shared)
            WantMarks(owner(), lease_dir / "wants").mark({NAME: (DEVICE, "mine")})
            mode = stat.S_IMODE((lease_dir / "wants").stat().st_mode)
            assert mode == (0o1777 if shared else 0o700), (name, oct(mode))
    finally:
        os.umask(old)


# ----------------------------------------------------------------------------------------------------------------
# marks are believed only when the kernel agrees: the named process's uid owns the file, its start time is the mark's

linux = pytest.mark.skipif(not kernel.HAVE_PROC, reason="the kernel's facts come from Linux's /proc")


def _forge(root: Path, named: int, **fields: object) -> Path:
    """A mark file whose name names process ``named``, written by this user, with the record a plane of that process
    would write (changed by ``fields``)."""
    body: dict[str, object] = {"version": 1, "pid": named, "ticks": kernel.process_ticks(named)}
    body.update({"uid": kernel.process_uid(named), "kind": "script", "endpoint": "forged", **fields})
    path = root / f"{NAME}.want-{named}-forged"
    path.write_text(json.dumps(body))
    return path


@linux
def test_a_mark_naming_a_process_of_another_user_is_nobody(tmp_path: Path) -> None:
    holder = plane(tmp_path)
    # a mark naming pid 1 (root's init), its record as init's would be, in a file this user wrote: when this user is
    # root, the file is handed to nobody, as another user's would be
    path = _forge(tmp_path, 1)
    if os.getuid() == 0:
        os.chown(path, 65534, 65534)
    assert holder.wanters({NAME}) == {}
    assert path.exists()  # a live process's mark stays (it is not this plane's to remove)


@linux
def test_a_mark_whose_start_time_is_not_its_process_is_nobody(tmp_path: Path) -> None:
    holder = plane(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        ticks = kernel.process_ticks(child.pid)
        assert ticks is not None
        # another process that once had this pid (a reused pid), a record without a start time, or naming another pid
        _forge(tmp_path, child.pid, ticks=ticks - 1)
        assert holder.wanters({NAME}) == {}
        _forge(tmp_path, child.pid, ticks=None)
        assert holder.wanters({NAME}) == {}
        _forge(tmp_path, child.pid, pid=os.getpid())
        assert holder.wanters({NAME}) == {}
        # the child's own mark (its uid's file, its start time) is read
        _forge(tmp_path, child.pid)
        (found,) = holder.wanters({NAME}).values()
        assert (found.pid, found.endpoint) == (child.pid, "forged")
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
