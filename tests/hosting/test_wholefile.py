"""``hosting/wholefile.py``: a private file replaced whole under a folder lock (the stores' own tests,
``test_secretstore.py`` and ``test_keystore.py``, run two writer processes through it)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flashpoint.hosting.wholefile import locked, replace_whole


def test_replace_whole_writes_a_private_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "a" / "store"
    with locked(root):
        replace_whole(root, "f.json", b"one")
        replace_whole(root, "f.json", b"two")
    assert (root / "f.json").read_bytes() == b"two"
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root / "f.json").st_mode) == 0o600
    assert sorted(p.name for p in root.iterdir()) == ["f.json", "lock"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with locked(root):
        replace_whole(root, "f.json", b"old")
    (root / "f.json.d").mkdir()  # a folder where the file goes: the rename fails
    with pytest.raises(OSError), locked(root):
        replace_whole(root, "f.json.d", b"new")
    assert (root / "f.json").read_bytes() == b"old"
    assert sorted(p.name for p in root.iterdir()) == ["f.json", "f.json.d", "lock"]


def test_a_link_in_place_of_the_lock_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("x")
    (root / "lock").symlink_to(target)
    with pytest.raises(OSError), locked(root):
        pass
    assert target.read_text() == "x"
