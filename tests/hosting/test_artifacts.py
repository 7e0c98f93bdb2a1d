"""hosting/artifacts.py: deterministic packing, the size limit, the content-addressed store and hostile archives."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.hosting import artifacts
from flashpoint.hosting.artifacts import ArtifactStore, pack


def _tree(root: Path) -> Path:
    root.mkdir()
    (root / "app.py").write_text("x = 1\n")
    (root / "lib").mkdir()
    (root / "lib" / "util.py").write_text("y = 2\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return [m.name for m in tar.getmembers()]


def test_pack_is_deterministic(tmp_path: Path) -> None:
    root = _tree(tmp_path / "p")
    first, second = pack(root), pack(root)
    assert first.data == second.data and first.digest == second.digest
    assert first.digest == hashlib.sha256(first.data).hexdigest()
    assert first.files == 3 and first.size == len("x = 1\n") + len("y = 2\n") + len("#!/bin/sh\n")
    os.utime(root / "app.py", (1, 1))
    assert pack(root).digest == first.digest
    (root / "app.py").write_text("x = 2\n")
    assert pack(root).digest != first.digest


def test_pack_headers(tmp_path: Path) -> None:
    packed = pack(_tree(tmp_path / "p"))
    assert packed.data[4:8] == b"\0\0\0\0"  # gzip mtime 0
    assert not packed.data[3] & 0x08  # no FNAME in the gzip header
    with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["app.py", "lib/util.py", "run.sh"]
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
    assert {m.name: m.mode for m in members} == {"app.py": 0o644, "lib/util.py": 0o644, "run.sh": 0o755}


def test_pack_leaves_out_secrets_and_tool_folders(tmp_path: Path) -> None:
    root = _tree(tmp_path / "p")
    (root / ".env").write_text("KEY=secret\n")
    (root / "lib" / ".env").write_text("KEY=secret\n")
    (root / ".env.local").write_text("KEY=secret\n")
    for folder in (".git", ".venv", ".flashpoint", "myenv"):
        (root / folder).mkdir()
        (root / folder / "file.py").write_text("z = 1\n")
    (root / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    names = _names(pack(root).data)
    assert names == ["app.py", "lib/util.py", "run.sh"]


def test_pack_links_inside_become_files_and_outside_are_left_out(tmp_path: Path) -> None:
    root = _tree(tmp_path / "p")
    (tmp_path / "secret.txt").write_text("s")
    (root / "outside.txt").symlink_to(tmp_path / "secret.txt")
    (root / "alias.py").symlink_to(root / "app.py")
    packed = pack(root)
    assert _names(packed.data) == ["alias.py", "app.py", "lib/util.py", "run.sh"]
    with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r:gz") as tar:
        alias = tar.getmember("alias.py")
        assert alias.isreg() and alias.size == len("x = 1\n")


def test_pack_exclude_patterns(tmp_path: Path) -> None:
    root = _tree(tmp_path / "p")
    (root / "weights.bin").write_bytes(b"w")
    assert _names(pack(root, exclude=["*.bin", "lib/"]).data) == ["app.py", "run.sh"]


def test_pack_over_the_limit_names_the_biggest(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    for i in range(7):
        (root / f"f{i}.bin").write_bytes(b"a" * (100 + i))
    with pytest.raises(BadInputError) as caught:
        pack(root, limit_bytes=500)
    message = str(caught.value)
    assert caught.value.code == "payload_too_large"
    assert "721 bytes" in message and "500 bytes" in message and ".flashignore" in message
    assert "--max-artifact-mb" in message
    for i in range(2, 7):
        assert f"f{i}.bin" in message
    assert "f0.bin" not in message and "f1.bin" not in message


# --------------------------------------------------------------------------------------------------------------------
# The store


def test_put_has_path_unpack(tmp_path: Path) -> None:
    packed = pack(_tree(tmp_path / "p"))
    store = ArtifactStore(tmp_path / "store")
    assert not store.has(packed.digest)
    assert store.put(packed.data, digest=packed.digest) == packed.digest
    assert store.put(packed.data) == packed.digest  # idempotent
    assert store.has(packed.digest)
    assert store.path(packed.digest).read_bytes() == packed.data
    assert (store.root.stat().st_mode & 0o777) == 0o700
    folder = store.unpack(packed.digest)
    assert folder == store.root / "unpacked" / packed.digest
    assert (folder / "lib" / "util.py").read_text() == "y = 2\n"
    assert os.access(folder / "run.sh", os.X_OK) and not os.access(folder / "app.py", os.X_OK)
    (folder / "marker").write_text("")
    assert store.unpack(packed.digest) == folder and (folder / "marker").exists()  # extracted once
    assert [p.name for p in (store.root / "unpacked").iterdir()] == [packed.digest]


def test_concurrent_unpacks_get_one_complete_folder(tmp_path: Path) -> None:
    packed = pack(_tree(tmp_path / "p"))
    store = ArtifactStore(tmp_path / "store")
    store.put(packed.data)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(store.unpack(packed.digest))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and (results[0] / "app.py").read_text() == "x = 1\n"
    assert [p.name for p in (store.root / "unpacked").iterdir()] == [packed.digest]


def test_digest_mismatch_and_bad_digests(tmp_path: Path) -> None:
    packed = pack(_tree(tmp_path / "p"))
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(BadInputError, match="damaged"):
        store.put(packed.data, digest="0" * 64)
    assert not store.root.exists() or not list(store.root.iterdir())
    for bad in ("../" + "0" * 61, "A" * 64, "0" * 63, "", "0" * 64 + "/x", "/etc/passwd"):
        with pytest.raises(BadInputError, match="64 lowercase hex"):
            store.path(bad)
        with pytest.raises(BadInputError):
            store.unpack(bad)
    with pytest.raises(NotFoundError):
        store.unpack("0" * 64)


def test_put_over_the_limit(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    packed = pack(_tree(tmp_path / "p"))
    with pytest.raises(BadInputError) as caught:
        store.put(packed.data, limit_bytes=10)
    assert caught.value.code == "payload_too_large"


# --------------------------------------------------------------------------------------------------------------------
# Hostile archives


def _archive(build: Callable[[tarfile.TarFile], None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"x") -> Callable[[tarfile.TarFile], None]:
    def build(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    return build


def _special(name: str, kind: bytes, link: str = "") -> Callable[[tarfile.TarFile], None]:
    def build(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = link
        tar.addfile(info)

    return build


def _both(*builds: Callable[[tarfile.TarFile], None]) -> Callable[[tarfile.TarFile], None]:
    def build(tar: tarfile.TarFile) -> None:
        for b in builds:
            b(tar)

    return build


#: the member limit in these tests (the real one, 100,000, takes seconds to reach)
FEW = 50


def _many(tar: tarfile.TarFile) -> None:
    for i in range(FEW + 1):
        tar.addfile(tarfile.TarInfo(f"f{i}"))


def _bomb() -> bytes:
    """A 64 MiB file of zeros: little compressed, over a 1 MiB limit."""
    return _archive(_file("zeros", b"\0" * (64 * 1024 * 1024)))


def _huge_pax_header(tar: tarfile.TarFile) -> None:
    """A header whose declared size says little of what it makes the reader read: 4 MiB of extended header."""
    info = tarfile.TarInfo("a.py")
    info.pax_headers = {"comment": "x" * (4 * 1024 * 1024)}
    tar.addfile(info, io.BytesIO(b""))


def _longer_than_declared() -> bytes:
    """A member whose data runs past its declared size: the rest reads as a broken header."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("a.py")
        info.size = 512
        tar.addfile(info, io.BytesIO(b"y" * 512))
    data = bytearray(raw.getvalue())
    data[512 + 512 : 512 + 1024] = b"z" * 512  # more data where the next header (or the end) should be
    return gzip.compress(bytes(data), mtime=0)


def _truncated() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("a.py")
        info.size = 4096
        tar.addfile(info, io.BytesIO(b"y" * 4096))
    return gzip.compress(raw.getvalue()[:1024], mtime=0)


HOSTILE: list[tuple[str, Callable[[], bytes], str]] = [
    ("absolute", lambda: _archive(_file("/etc/evil")), "relative paths"),
    ("dotdot", lambda: _archive(_file("../evil")), r"'\.\.'"),
    ("inner dotdot", lambda: _archive(_file("a/../../evil")), r"'\.\.'"),
    ("dot", lambda: _archive(_file("./a/./b")), r"'\.'"),
    ("backslash", lambda: _archive(_file("..\\evil")), "relative paths"),
    ("drive", lambda: _archive(_file("C:evil")), "relative paths"),
    ("symlink", lambda: _archive(_special("link", tarfile.SYMTYPE, "/etc/passwd")), "symbolic link"),
    ("hard link", lambda: _archive(_special("link", tarfile.LNKTYPE, "etc/passwd")), "hard link"),
    ("char device", lambda: _archive(_special("dev", tarfile.CHRTYPE)), "device"),
    ("block device", lambda: _archive(_special("dev", tarfile.BLKTYPE)), "device"),
    ("fifo", lambda: _archive(_special("fifo", tarfile.FIFOTYPE)), "FIFO"),
    ("duplicate", lambda: _archive(_both(_file("a.py"), _file("a.py", b"y"))), "twice"),
    ("file under a file", lambda: _archive(_both(_file("a"), _file("a/b"))), "inside its file"),
    ("folder then file", lambda: _archive(_both(_file("a/b"), _file("a"))), "both as a file and as a folder"),
    ("too many members", lambda: _archive(_many), "more than 50 members"),
    ("gzip bomb", _bomb, "more than 1.0 MB"),
    ("huge header", lambda: _archive(_huge_pax_header), "more bytes than the limit allows"),
    ("longer than declared", _longer_than_declared, "not a readable"),
    ("truncated", _truncated, "not a readable"),
    ("corrupt gzip", lambda: b"\x1f\x8b\x08\x00" + b"\xff" * 64, "not a readable"),
    ("not gzip", lambda: b"hello, world", "not a readable"),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in HOSTILE], ids=[n for n, _, _ in HOSTILE])
def test_hostile_archives_are_refused_leaving_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Callable[[], bytes], message: str
) -> None:
    monkeypatch.setattr(artifacts, "MAX_MEMBERS", FEW)
    archive = data()
    store = ArtifactStore(tmp_path / "store", limit_bytes=1024 * 1024)
    with pytest.raises(BadInputError, match=message):
        store.put(archive)
    assert not store.root.exists() or not list(store.root.iterdir())
    # on disk already (an older server, a damaged disk): unpack refuses it too and leaves no folder
    digest = hashlib.sha256(archive).hexdigest()
    store.root.mkdir(exist_ok=True)
    store.path(digest).write_bytes(archive)
    with pytest.raises(BadInputError, match=message):
        store.unpack(digest)
    assert list((store.root / "unpacked").iterdir()) == []
    assert not (tmp_path / "evil").exists()
