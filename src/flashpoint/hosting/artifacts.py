"""Deploy artifacts: a project folder packed into one deterministic ``.tar.gz`` and kept by the server under its
SHA-256 (issue 22; docs/decisions/0091-artifacts.md).

- ``pack(root)`` packs exactly ``project.project_tree(root)`` (the ignore rules, Flash's folder defaults, never
  ``.env``), less any ``exclude`` patterns (gitwildmatch), into bytes whose digest depends on the files' names,
  contents and owner-executable bits only: sorted members, mtime 0, uid/gid 0, no owner names, modes 0644/0755, a
  gzip header with mtime 0 and no file name.
- ``ArtifactStore(root)`` keeps artifacts as ``root/<hex>.tar.gz`` (written to a temporary file, then renamed) and
  unpacks one once to ``root/unpacked/<hex>/`` (a temporary folder, then renamed).

Invariants: a digest is checked against ``[0-9a-f]{64}`` before it touches the file system, so it is never a path;
an archive is read member by member and only regular files (and folders) are written, inside the target, with the
bytes read bounded (names that leave the folder, links, devices, FIFOs, duplicates, too many members, too many bytes
and corrupt data are refused with ``BadInputError``, leaving nothing behind). Pure of HTTP and of the scheduler.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

import pathspec

from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.hosting.projectfiles import project_tree
from flashpoint.private import private_dir

__all__ = ["DEFAULT_LIMIT", "DIGEST", "MAX_MEMBERS", "NEVER_PACKED", "ArtifactStore", "Packed", "check_digest", "pack"]

#: the most bytes an artifact's files may hold, uncompressed (Flash's artifact limit, 1500 MB)
DEFAULT_LIMIT = 1500 * 1024 * 1024
#: the most members an archive may hold
MAX_MEMBERS = 100_000
#: files never packed, at any depth, whatever the ignore rules say: environment files hold secrets
#: (``project_tree`` leaves out ``.env`` only; Flash leaves out ``.env`` and ``.env.local``)
NEVER_PACKED = (".env", ".env.*")
#: what a digest looks like: lowercase hex SHA-256
DIGEST = re.compile(r"[0-9a-f]{64}")
#: the code of a refusal for size (the API's code for a body over its limit)
TOO_LARGE = "payload_too_large"
#: what to do about a tree over the limit
_ADVICE = "leave big files out with .flashignore, or raise the server's --max-artifact-mb"
_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Packed:
    """A packed project: the ``.tar.gz`` bytes, their SHA-256 (lowercase hex), the number of files and their
    uncompressed size in bytes."""

    data: bytes
    digest: str
    files: int
    size: int


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def _too_large(size: int, limit: int, biggest: Sequence[tuple[int, str]]) -> BadInputError:
    named = ", ".join(f"{name} ({_mb(n)})" for n, name in biggest)
    return BadInputError(
        f"the project's files are {_mb(size)} ({size} bytes), over the limit of {_mb(limit)} ({limit} bytes); "
        f"the biggest: {named}; {_ADVICE}",
        code=TOO_LARGE,
    )


def _members(root: Path, exclude: Sequence[str]) -> list[tuple[str, Path]]:
    """``(name in the archive, path)`` of every file to pack, in name order."""
    spec = pathspec.GitIgnoreSpec.from_lines([*NEVER_PACKED, *exclude])
    found: list[tuple[str, Path]] = []
    for path in project_tree(root):
        name = path.relative_to(root).as_posix()
        if spec.match_file(name):
            continue
        found.append((name, path))
    return sorted(found)


def pack(root: Path, *, limit_bytes: int = DEFAULT_LIMIT, exclude: Sequence[str] = ()) -> Packed:
    """Pack the project folder ``root`` (``project.project_tree``, less files matching ``exclude``, gitwildmatch
    patterns relative to ``root``) into a deterministic ``.tar.gz``.

    Raises:
        BadInputError: the files are over ``limit_bytes`` uncompressed (code ``payload_too_large``; nothing is read
            or compressed then), or a file cannot be read.
    """
    root = Path(root).resolve()
    members = _members(root, exclude)
    sizes: list[tuple[int, str]] = []
    total = 0
    for name, path in members:
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise BadInputError(f"cannot read {name} in {root}: {exc}") from None
        sizes.append((size, name))
        total += size
    if total > limit_bytes:
        raise _too_large(total, limit_bytes, sorted(sizes, key=lambda s: (-s[0], s[1]))[:5])
    buffer = io.BytesIO()
    read = 0
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=6) as zipped:
        with tarfile.open(fileobj=zipped, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, path in members:
                try:
                    data = path.read_bytes()
                    executable = bool(path.stat().st_mode & stat.S_IXUSR)
                except OSError as exc:
                    raise BadInputError(f"cannot read {name} in {root}: {exc}") from None
                read += len(data)
                if read > limit_bytes:  # a file grew while packing
                    raise _too_large(read, limit_bytes, [(len(data), name)])
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o755 if executable else 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.type = tarfile.REGTYPE
                tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    return Packed(data=data, digest=hashlib.sha256(data).hexdigest(), files=len(members), size=read)


def check_digest(digest: object) -> str:
    """``digest`` when it is a lowercase hex SHA-256, else ``BadInputError``."""
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise BadInputError(f"an artifact digest must be 64 lowercase hex digits (SHA-256), got {str(digest)[:80]!r}")
    return digest


# --------------------------------------------------------------------------------------------------------------------
# Reading an archive


class _Bounded:
    """A reader that refuses to give more than ``cap`` bytes of ``inner`` (a gzip bomb stops there, whatever the
    headers declare) and keeps the last bytes it gave, to check the archive's end marker."""

    def __init__(self, inner: IO[bytes] | gzip.GzipFile, cap: int) -> None:
        self._inner: IO[bytes] | gzip.GzipFile = inner
        self._left = cap
        self._given = 0
        #: (offset, bytes) of the last reads
        self._recent: deque[tuple[int, bytes]] = deque(maxlen=8)

    def read(self, size: int = -1) -> bytes:
        want = self._left + 1 if size < 0 else min(size, self._left + 1)
        data = self._inner.read(want)
        if len(data) > self._left:
            raise BadInputError("the archive unpacks to more bytes than the limit allows", code=TOO_LARGE)
        self._left -= len(data)
        self._recent.append((self._given, data))
        self._given += len(data)
        return data

    def block(self, offset: int) -> bytes | None:
        """The 512 bytes at ``offset`` when they were read lately, else None."""
        if not self._recent:
            return None
        start = self._recent[0][0]
        joined = b"".join(data for _, data in self._recent)
        if offset < start or offset + tarfile.BLOCKSIZE > start + len(joined):
            return None
        return joined[offset - start : offset - start + tarfile.BLOCKSIZE]


def _member_path(name: str) -> PurePosixPath:
    """The relative path of a member, or ``BadInputError`` when its name could reach outside the folder."""
    if not name or "\0" in name or "\\" in name or name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise BadInputError(f"the archive holds a member named {name!r}: names must be relative paths inside it")
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise BadInputError(f"the archive holds a member named {name!r}: no '.', '..' or empty parts are allowed")
    return PurePosixPath(*parts)


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return "a special member"


def _iterate(source: IO[bytes], limit_bytes: int) -> Iterator[tuple[tarfile.TarInfo, PurePosixPath, IO[bytes] | None]]:
    """Each member of the ``.tar.gz`` read from ``source``, checked: ``(member, path, file or None for a folder)``.

    Raises:
        BadInputError: what was wrong.
    """
    cap = limit_bytes + MAX_MEMBERS * 2048 + _CHUNK  # the files, and their headers
    try:
        unzipped = gzip.GzipFile(fileobj=source, mode="rb")
        stream = _Bounded(unzipped, cap)
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
            seen: set[PurePosixPath] = set()
            files: set[PurePosixPath] = set()
            folders: set[PurePosixPath] = set()
            total = 0
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise BadInputError(f"the archive holds more than {MAX_MEMBERS} members")
                path = _member_path(member.name)
                if path in seen:
                    raise BadInputError(f"the archive holds {member.name!r} twice")
                seen.add(path)
                for parent in list(path.parents)[:-1]:
                    if parent in files:
                        raise BadInputError(f"the archive holds {member.name!r} inside its file {str(parent)!r}")
                    folders.add(parent)
                if not member.isdir():
                    if path in folders:
                        raise BadInputError(f"the archive holds {member.name!r} both as a file and as a folder")
                    files.add(path)
                if member.isdir():
                    yield member, path, None
                    continue
                if not member.isreg():
                    raise BadInputError(
                        f"the archive's member {member.name!r} is {_kind(member)}: only files are allowed"
                    )
                total += member.size
                if total > limit_bytes:
                    raise BadInputError(
                        f"the archive unpacks to more than {_mb(limit_bytes)} ({limit_bytes} bytes); {_ADVICE}",
                        code=TOO_LARGE,
                    )
                file = tar.extractfile(member)
                assert file is not None  # a regular file
                yield member, path, file
            # tarfile ends quietly at a header it cannot read: only a block of zeros is the end of an archive
            end = stream.block(tar.offset)
            if end is None or end.count(0) != tarfile.BLOCKSIZE:
                raise BadInputError(
                    "the archive is not a readable .tar.gz: it is cut short, or data follows its last member "
                    "(a member longer than its header says)"
                )
    except BadInputError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError, ValueError) as exc:
        raise BadInputError(f"the archive is not a readable .tar.gz: {exc}") from None


def _extract(source: IO[bytes], target: Path, limit_bytes: int) -> None:
    """Write the archive's files under the new folder ``target`` (checked as they come)."""
    for member, path, file in _iterate(source, limit_bytes):
        out = target.joinpath(*path.parts)
        try:
            if file is None:
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            mode = 0o755 if member.mode & stat.S_IXUSR else 0o644
            with os.fdopen(os.open(out, flags, mode), "wb") as sink:
                written = 0
                while chunk := file.read(_CHUNK):
                    written += len(chunk)
                    sink.write(chunk)
            if written != member.size:
                raise BadInputError(f"the archive's member {member.name!r} is shorter than its header says")
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise BadInputError(f"the archive is not a readable .tar.gz: {exc}") from None
        except OSError as exc:
            raise BadInputError(f"the archive's member {member.name!r} cannot be written: {exc}") from None


def _check(data: bytes, limit_bytes: int) -> None:
    """Read the whole archive as ``unpack`` would, writing nothing."""
    try:
        for _member, _path, file in _iterate(io.BytesIO(data), limit_bytes):
            if file is not None:
                while file.read(_CHUNK):
                    pass
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        raise BadInputError(f"the archive is not a readable .tar.gz: {exc}") from None


# --------------------------------------------------------------------------------------------------------------------
# The store


class ArtifactStore:
    """Artifacts under ``root`` (made 0700): ``<hex>.tar.gz`` and, once unpacked, ``unpacked/<hex>/``."""

    def __init__(self, root: Path, *, limit_bytes: int = DEFAULT_LIMIT) -> None:
        self.root = Path(root)
        self.limit_bytes = limit_bytes

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    def path(self, digest: str) -> Path:
        """Where the artifact ``digest`` is (or would be) kept."""
        return self.root / f"{check_digest(digest)}.tar.gz"

    def has(self, digest: str) -> bool:
        """Whether the artifact ``digest`` is kept."""
        return self.path(digest).is_file()

    def put(self, data: bytes, *, digest: str | None = None, limit_bytes: int | None = None) -> str:
        """Keep ``data`` (a ``.tar.gz``) and return its digest; the same bytes again are kept once.

        Raises:
            BadInputError: ``digest`` is given and is not the data's, the data is over the limit, or the archive
                would be refused by ``unpack`` (nothing is kept then).
        """
        limit = self.limit_bytes if limit_bytes is None else limit_bytes
        actual = hashlib.sha256(data).hexdigest()
        if digest is not None and check_digest(digest) != actual:
            raise BadInputError(
                f"the artifact's SHA-256 is {actual}, not {digest}: it was damaged on the way; send it again"
            )
        if len(data) > limit:
            raise BadInputError(
                f"the artifact is {_mb(len(data))}, over the limit of {_mb(limit)}; {_ADVICE}", code=TOO_LARGE
            )
        final = self.path(actual)
        if final.is_file():
            return actual
        _check(data, limit)
        private_dir(self.root, ours=True)
        fd, temp = tempfile.mkstemp(dir=self.root, prefix=".put-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, final)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return actual

    def unpack(self, digest: str) -> Path:
        """The folder holding the artifact's files, extracted on the first call (a later or concurrent call gets the
        same folder, complete).

        Raises:
            NotFoundError: no such artifact is kept.
            BadInputError: the archive is refused (nothing is left behind).
        """
        source = self.path(digest)
        unpacked = self.root / "unpacked"
        final = unpacked / digest
        if final.is_dir():
            return final
        if not source.is_file():
            raise NotFoundError(f"no artifact {digest} is kept; upload it first")
        private_dir(self.root, ours=True)
        unpacked.mkdir(mode=0o700, exist_ok=True)
        temp = Path(tempfile.mkdtemp(dir=unpacked, prefix=f".{digest[:12]}-"))
        try:
            with source.open("rb") as file:
                _extract(file, temp, self.limit_bytes)
            try:
                os.rename(temp, final)
            except OSError:
                if not final.is_dir():  # not another caller's folder arriving first
                    raise
                shutil.rmtree(temp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return final
