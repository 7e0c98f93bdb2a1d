"""The environment cache: one virtual environment per requirement set, built once, shared by every endpoint and process.

Layout of the cache root (``$FLASHPOINT_ENV_DIR``, else ``~/.flashpoint/envs``)::

    <key>/                    a finished environment; it exists only once complete (renamed into place)
    <key>.json                EnvironmentRecord: requirements, python, created, last_used, endpoints
    <key>.lock                the key's flock (lock.py); never deleted
    <key>.inuse               the in-use hold (lock.py): shared flocks of the planes whose endpoints run in the
                              environment (``ensure(hold=True)``); prune leaves a held environment alone. Created by
                              the first hold, never deleted
    <key>.building            BuildProgress while a build runs
    <key>.failed              BuildFailure of the last build, raised again until a retry
    .<key>.tmp-<pid>-<token>/ a build in progress, or what a crashed one left (removed by the next builder)
    .<key>.trash-<token>/     an environment being removed

Everything that changes a key (build, hit bookkeeping, removal, taking an in-use hold) happens under its lock, so a
waiter that gets the lock after a build finds the environment done (a hit) or the failure recorded, and never builds
twice, and prune never removes an environment between the ``ensure`` that found it and that caller's hold.

A build has a time limit (``build_timeout_s``, FLASHPOINT_ENV_BUILD_TIMEOUT_S): past it the installer is killed and
the build fails like any other (recorded). The caller can stop a build too (``ensure(interrupt=...)``, the plane
closing): the installer is killed, the temporary directory removed, and nothing recorded (``BuildInterrupted``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from flashpoint.config import env_build_timeout_s
from flashpoint.environments.build import (
    BuildFailed,
    BuildStopped,
    build_environment,
    env_python,
    inherited_paths,
    uv_binary,
)
from flashpoint.environments.errors import BuildInterrupted, EnvironmentBuildError
from flashpoint.environments.interrupt import TIMED_OUT, Interrupt
from flashpoint.environments.keys import KEY_LENGTH, PythonId, environment_key, normalize_requirements
from flashpoint.environments.lock import InUseHold, KeyLock, in_use, is_locked
from flashpoint.environments.pipconfig import read_pip_config, uv_options
from flashpoint.environments.records import (
    BuildFailure,
    BuildProgress,
    EnvironmentRecord,
    bounded_tail,
    read_json,
    write_json,
)
from flashpoint.private import STATE_DIR_NAME, private_dir

__all__ = ["CacheEntry", "Environment", "EnvironmentCache", "PruneReport", "default_root"]

_KEY = re.compile(rf"[0-9a-f]{{{KEY_LENGTH}}}")
_LEFTOVER = re.compile(rf"^\.([0-9a-f]{{{KEY_LENGTH}}})\.(tmp|trash)-")
_R = TypeVar("_R", EnvironmentRecord, BuildProgress, BuildFailure)
#: seconds between looks at the caller's interrupt while another builder holds the key's lock (flock cannot be woken)
_LOCK_WAIT_S = 0.2


def default_root() -> Path:
    """``$FLASHPOINT_ENV_DIR``, else ``~/.flashpoint/envs``."""
    override = os.environ.get("FLASHPOINT_ENV_DIR")
    return Path(override).expanduser() if override else Path.home() / ".flashpoint" / "envs"


@dataclass(frozen=True)
class Environment:
    """A finished environment: run ``python`` to be inside it."""

    key: str
    #: the environment's directory
    path: Path
    #: its interpreter: ``<path>/bin/python``
    python: Path
    site_packages: Path
    #: normalised (``keys.normalize_requirements``)
    requirements: tuple[str, ...]
    #: host directories appended to ``sys.path`` after ``site_packages`` (the host's site-packages, flashpoint's home)
    inherited: tuple[str, ...] = ()
    #: whether the ``ensure`` that returned it ran the installer (false: it was found in the cache)
    built: bool = False
    #: the in-use hold ``ensure(hold=True)`` took: ``prune`` leaves the environment alone until ``release()``
    hold: InUseHold | None = field(default=None, compare=False, repr=False)

    @property
    def in_use_path(self) -> Path:
        """The file whose shared flocks keep ``prune`` off this environment (``<root>/<key>.inuse``): the plane's hold
        and each worker's own (``worker/isolation.hold_environment``, told of it by ``FLASHPOINT_ENV_INUSE``)."""
        return self.path.with_name(f"{self.key}.inuse")

    def release(self) -> None:
        """Let go of the in-use hold, if ``ensure`` took one (``prune`` may remove the environment from now on); a
        second call does nothing."""
        if self.hold is not None:
            self.hold.release()

    def pythonpath(self, entries: Sequence[str]) -> list[str]:
        """``entries`` (a parent's ``sys.path``, for ``PYTHONPATH``) without the directories the environment inherits.

        ``PYTHONPATH`` comes before site-packages on ``sys.path``, so a worker started in this environment with its
        parent's full path would import the host's packages over the environment's pins. The inherited directories
        still reach it, after its own, through the ``.pth``.
        """
        dropped = {os.path.realpath(p) for p in self.inherited}
        return [entry for entry in entries if entry and os.path.realpath(entry) not in dropped]


@dataclass(frozen=True)
class CacheEntry:
    """One environment as ``flashpoint venv list`` shows it."""

    key: str
    path: Path
    #: ``None`` when its ``<key>.json`` is missing or unreadable
    record: EnvironmentRecord | None
    #: bytes of its files (each hard-linked file once), measured when listed
    size: int
    #: whether a plane holds it now (its endpoint's workers run there): ``prune`` leaves it alone
    in_use: bool = False


@dataclass
class PruneReport:
    """What ``prune`` did."""

    removed: list[str] = field(default_factory=list)
    #: keys left alone because their lock was held (a build, or a hit's bookkeeping, at that moment)
    busy: list[str] = field(default_factory=list)
    #: keys left alone because a plane holds them (``ensure(hold=True)``): its workers run there
    in_use: list[str] = field(default_factory=list)


class EnvironmentCache:
    """Builds and finds per-endpoint environments under ``root``.

    Args:
        root: the cache directory; ``default_root()`` when ``None``.
        clock: seconds since the epoch, for ``created``/``last_used``/``prune`` (tests inject one).
        pip_config: a ``pip config list`` mapping to translate instead of asking this interpreter's pip (tests).
        interpreter: the Python the environments are built on; this one by default. Its host environment's
            site-packages are inherited, so it must be the interpreter flashpoint runs in.
        build_timeout_s: the most seconds one build (all its uv steps together) may run before it is stopped and
            fails; ``None``: FLASHPOINT_ENV_BUILD_TIMEOUT_S (``config.env_build_timeout_s``), read when a build starts.
    """

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        clock: Callable[[], float] = time.time,
        pip_config: dict[str, str] | None = None,
        interpreter: str | None = None,
        build_timeout_s: float | None = None,
    ) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.build_timeout_s = build_timeout_s
        self.clock = clock
        self.python = PythonId.current()
        self.interpreter = interpreter or sys.executable
        self._pip_config = pip_config
        self._count_lock = threading.Lock()
        #: times this instance ran the installer, failed builds included (a hit or a recorded failure does not
        #: count): what tests assert instead of timing
        self.builds = 0

    # -- paths

    def _file(self, key: str, suffix: str) -> Path:
        return self.root / f"{key}{suffix}"

    def key(self, requirements: Iterable[str]) -> str:
        """The key ``ensure`` would use for ``requirements`` (``InvalidRequirementError`` for a bad one)."""
        return environment_key(requirements, self.python)

    # -- the verb the plane calls

    def ensure(
        self,
        requirements: Iterable[str],
        *,
        endpoint: str,
        on_line: Callable[[str], None] | None = None,
        retry: bool = False,
        interrupt: Interrupt | None = None,
        hold: bool = False,
    ) -> Environment:
        """The environment holding ``requirements``, built now when the cache has none. Blocking: call it in a thread.

        Args:
            requirements: pip requirement strings (``EndpointSpec.dependencies``).
            endpoint: the endpoint asking, recorded in the environment's metadata.
            on_line: receives every line of the installer's output while this call builds (and one line saying so
                when it waits for another process's build), in the calling thread.
            retry: build again even though the last build of this requirement set failed.
            interrupt: set from another thread, it stops this call: the installer running is killed, the temporary
                directory removed, the key's lock let go, and nothing recorded (a wait for another builder ends too).
            hold: take an in-use hold (``Environment.hold``) before the key's lock is let go, so ``prune`` leaves the
                environment alone until ``Environment.release()``. The plane holds the environments its workers run in.

        Raises:
            InvalidRequirementError: a requirement is not one PEP 508 requirement; nothing ran.
            EnvironmentBuildError: the build failed now (or ran past ``build_timeout_s``), or failed before and
                ``retry`` is false (``recorded``).
            BuildInterrupted: ``interrupt`` was set before the build finished.
        """
        say = on_line or (lambda line: None)
        reqs = normalize_requirements(requirements)
        key = environment_key(reqs, self.python)
        if self.root == Path.home() / STATE_DIR_NAME / "envs":  # the default: ~/.flashpoint is this user's only
            private_dir(self.root.parent, ours=True)
        self.root.mkdir(parents=True, exist_ok=True)
        lock = KeyLock(self._file(key, ".lock"))
        if not lock.acquire(blocking=False):
            progress = self.building(key)
            if progress is not None:
                say(
                    f"waiting for process {progress.pid}, which has been building environment {key} for "
                    f"{progress.elapsed(self.clock()):.0f} s (last line: {progress.last_line or '-'})"
                )
            _wait_for(lock, interrupt, key)
        try:
            # we hold the lock, so a progress record here was left by a builder that died
            with contextlib.suppress(FileNotFoundError):
                self._file(key, ".building").unlink()
            found = self._finished(key, endpoint)
            if found is None:
                failure = self.failure(key)
                if failure is not None and not retry:
                    raise failure.error(recorded=True)
                found = self._build(key, reqs, endpoint, say, interrupt)
            # still under the lock: prune cannot remove it between this hit and the hold
            return replace(found, hold=InUseHold(self._file(key, ".inuse"))) if hold else found
        finally:
            lock.release()

    def _finished(self, key: str, endpoint: str) -> Environment | None:
        """Under the lock: the finished environment (its record touched), or ``None``; removes a broken one."""
        path = self.root / key
        if not path.is_dir():
            return None
        data = read_json(self._file(key, ".json"))
        record = _parse(EnvironmentRecord, data)
        if record is None or not record.site_packages or not env_python(path).exists():
            # no record to describe it, or its interpreter is gone (the host Python was removed): build it again
            self._remove(key)
            return None
        endpoints = record.endpoints if endpoint in record.endpoints else (*record.endpoints, endpoint)
        write_json(self._file(key, ".json"), replace(record, last_used=self.clock(), endpoints=endpoints).to_json())
        return _environment(path, record, built=False)

    def _build(
        self,
        key: str,
        reqs: tuple[str, ...],
        endpoint: str,
        say: Callable[[str], None],
        interrupt: Interrupt | None,
    ) -> Environment:
        """Under the lock: build ``key`` in a temporary directory and rename it into place, within the time limit."""
        limit = self.build_timeout_s if self.build_timeout_s is not None else env_build_timeout_s()
        with self._count_lock:
            self.builds += 1
        self._clean_leftovers(key)
        with contextlib.suppress(FileNotFoundError):
            self._file(key, ".failed").unlink()
        progress = BuildProgress(key=key, pid=os.getpid(), started=self.clock(), endpoint=endpoint, requirements=reqs)
        progress_file = self._file(key, ".building")
        write_json(progress_file, progress.to_json())

        def line(text: str) -> None:
            nonlocal progress
            progress = replace(progress, last_line=text, lines=progress.lines + 1)
            write_json(progress_file, progress.to_json())
            say(text)

        tmp = self.root / f".{key}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        inherit = inherited_paths()
        # the build's own interrupt: its time limit sets it, and so does the caller's (linked) when the caller's is set
        stop = Interrupt()
        deadline = threading.Timer(limit, stop.set, args=(TIMED_OUT,))
        deadline.daemon = True
        try:
            with interrupt.linked(stop) if interrupt is not None else contextlib.nullcontext():
                deadline.start()
                try:
                    config = self._pip_config if self._pip_config is not None else read_pip_config(self.interpreter)
                    what = " ".join(reqs) or "(no requirements)"
                    line(f"building environment {key} for endpoint {endpoint!r}: {what}")
                    purelib = build_environment(
                        tmp,
                        reqs,
                        python=self.interpreter,
                        uv=uv_binary(),
                        options=uv_options(config),
                        inherit=inherit,
                        on_line=line,
                        cwd=self.root,
                        stop=stop,
                    )
                finally:
                    deadline.cancel()
            now = self.clock()
            record = EnvironmentRecord(
                key=key,
                requirements=reqs,
                python=self.python.tag,
                host=self.python.prefix,
                created=now,
                last_used=now,
                endpoints=(endpoint,),
                site_packages=str(purelib.relative_to(tmp)),
                inherited=tuple(inherit),
            )
            # the record first, the directory last: the directory's existence is what "done" means
            write_json(self._file(key, ".json"), record.to_json())
            os.rename(tmp, self.root / key)
        except BuildStopped as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.reason != TIMED_OUT:  # the caller stopped it: nothing to record, the next ensure builds again
                raise BuildInterrupted(
                    f"the build of environment {key} for endpoint {endpoint!r} was interrupted", key=key
                ) from None
            raise self._record_failure(
                key,
                reqs,
                endpoint,
                f"the build ran past its time limit of {limit:g} s and was stopped (FLASHPOINT_ENV_BUILD_TIMEOUT_S; "
                "raise it for a large download or a slow index)",
                returncode=None,
                tail=exc.tail,
            ) from None
        except BuildFailed as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise self._record_failure(
                key, reqs, endpoint, str(exc), returncode=exc.returncode, tail=exc.tail
            ) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                progress_file.unlink()
        return _environment(self.root / key, record, built=True)

    def _record_failure(
        self, key: str, reqs: tuple[str, ...], endpoint: str, cause: str, *, returncode: int | None, tail: Sequence[str]
    ) -> EnvironmentBuildError:
        """Under the lock: record the failed build of ``key``; the error to raise."""
        failure = BuildFailure(
            key=key,
            requirements=reqs,
            endpoint=endpoint,
            failed_at=self.clock(),
            message=(
                f"could not build the environment for endpoint {endpoint!r} ({', '.join(reqs)}): {cause}. Fix the "
                "dependencies; if the cause has passed (the network, say), retry: ensure(..., retry=True) or "
                "`flashpoint venv prune --failed`"
            ),
            returncode=returncode,
            output_tail=bounded_tail(tail),
        )
        write_json(self._file(key, ".failed"), failure.to_json())
        return failure.error(recorded=False)

    # -- what other processes can read

    def building(self, key: str) -> BuildProgress | None:
        """The build of ``key`` running now (in any process), or ``None``."""
        progress = _parse(BuildProgress, read_json(self._file(key, ".building")))
        if progress is None or not is_locked(self._file(key, ".lock")):
            return None  # no record, or one left by a builder that died: nobody holds the lock
        return progress

    def in_progress(self) -> list[BuildProgress]:
        """Every build running now, in any process, oldest first."""
        found = [self.building(key) for key in self._keys_with(".building")]
        return sorted((p for p in found if p is not None), key=lambda p: p.started)

    def failure(self, key: str) -> BuildFailure | None:
        """The recorded failure of ``key``'s last build, or ``None``."""
        return _parse(BuildFailure, read_json(self._file(key, ".failed")))

    def failures(self) -> list[BuildFailure]:
        """Every recorded failure, oldest first."""
        found = [self.failure(key) for key in self._keys_with(".failed")]
        return sorted((f for f in found if f is not None), key=lambda f: f.failed_at)

    def entries(self) -> list[CacheEntry]:
        """Every finished environment, most recently used first, with its size measured now."""
        entries = []
        for path in self._glob("*"):
            if _KEY.fullmatch(path.name) and path.is_dir():
                key = path.name
                record = _parse(EnvironmentRecord, read_json(self._file(key, ".json")))
                held = in_use(self._file(key, ".inuse"))
                entries.append(CacheEntry(key=key, path=path, record=record, size=_disk_size(path), in_use=held))
        return sorted(entries, key=lambda e: -(e.record.last_used if e.record else 0.0))

    # -- removal

    def prune(self, *, unused_for_s: float | None = None, everything: bool = False) -> PruneReport:
        """Remove environments unused for ``unused_for_s`` seconds (by ``last_used``), or all with ``everything``
        (their failure records too).

        A key whose lock is held right now is skipped and reported ``busy``: it is being built, and removing the
        directory under a builder would break its rename. An environment a plane holds (``ensure(hold=True)``: its
        endpoint's workers run there) is skipped and reported ``in_use``, with ``everything`` too. Environments are
        removed by renaming them aside first, so an interrupted removal never leaves a half environment under the key's
        name.
        """
        if unused_for_s is None and not everything:
            raise ValueError("prune needs unused_for_s or everything=True")
        report = PruneReport()
        keys = {p.name for p in self._glob("*") if _KEY.fullmatch(p.name) and p.is_dir()}
        keys |= self._keys_with(".json") | self._keys_with(".building")
        if everything:
            keys |= self._keys_with(".failed")
        keys |= {m.group(1) for p in self._glob(".*") if (m := _LEFTOVER.match(p.name))}
        now = self.clock()
        for key in sorted(keys):
            lock = KeyLock(self._file(key, ".lock"))
            if not lock.acquire(blocking=False):
                report.busy.append(key)
                continue
            try:
                self._clean_leftovers(key)
                with contextlib.suppress(FileNotFoundError):  # we hold the lock: a progress record here is stale
                    self._file(key, ".building").unlink()
                record = _parse(EnvironmentRecord, read_json(self._file(key, ".json")))
                exists = (self.root / key).is_dir()
                # asked under the key lock, which every hold is taken under: no hold can begin before the removal
                if exists and in_use(self._file(key, ".inuse")):
                    report.in_use.append(key)
                    continue
                if not everything and exists and record is not None:
                    assert unused_for_s is not None
                    if now - record.last_used < unused_for_s:
                        continue
                if everything:
                    with contextlib.suppress(FileNotFoundError):
                        self._file(key, ".failed").unlink()
                if exists or record is not None:
                    self._remove(key)
                    if exists:
                        report.removed.append(key)
            finally:
                lock.release()
        return report

    def forget_failures(self) -> list[str]:
        """Delete every recorded failure, so the next ``ensure`` of those keys builds again; their keys."""
        forgotten = []
        for path in self._glob("*.failed"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                forgotten.append(path.name[: -len(".failed")])
        return sorted(forgotten)

    def _remove(self, key: str) -> None:
        """Under the lock: remove ``key``'s environment and record (its lock file stays: see lock.py)."""
        path = self.root / key
        if path.is_dir():
            trash = self.root / f".{key}.trash-{secrets.token_hex(4)}"
            os.rename(path, trash)
            shutil.rmtree(trash, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self._file(key, ".json").unlink()

    def _clean_leftovers(self, key: str) -> None:
        """Under the lock: remove temporary and trash directories of ``key`` left by a process that died."""
        for path in self._glob(f".{key}.*"):
            if _LEFTOVER.match(path.name) and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)

    def _keys_with(self, suffix: str) -> set[str]:
        """The keys that have a ``<key><suffix>`` file."""
        stems = (path.name[: -len(suffix)] for path in self._glob(f"*{suffix}"))
        return {stem for stem in stems if _KEY.fullmatch(stem)}

    def _glob(self, pattern: str) -> list[Path]:
        try:
            return sorted(self.root.glob(pattern))
        except OSError:
            return []


def _wait_for(lock: KeyLock, interrupt: Interrupt | None, key: str) -> None:
    """Take ``lock``, which another builder holds now; give up with ``BuildInterrupted`` when ``interrupt`` is set.

    Without an interrupt, a blocking ``flock``. With one, a look every ``_LOCK_WAIT_S`` (the one wait here that
    polls): a thread blocked in ``flock`` cannot be woken, and a plane closing must not wait for another process's
    build to end.
    """
    if interrupt is None:
        lock.acquire()
        return
    while not lock.acquire(blocking=False):
        if interrupt.wait(_LOCK_WAIT_S):
            raise BuildInterrupted(f"the wait for the build of environment {key} was interrupted", key=key)


def _environment(path: Path, record: EnvironmentRecord, *, built: bool) -> Environment:
    return Environment(
        key=record.key,
        path=path,
        python=env_python(path),
        site_packages=path / record.site_packages,
        requirements=record.requirements,
        inherited=record.inherited,
        built=built,
    )


def _parse(kind: type[_R], data: dict[str, Any] | None) -> _R | None:
    """``kind.from_json(data)``, or ``None`` when there is no data or it has the wrong shape."""
    if data is None:
        return None
    try:
        return kind.from_json(data)
    except (TypeError, ValueError):
        return None


def _disk_size(path: Path) -> int:
    """Bytes of the files under ``path``, not following links; a file hard-linked twice counts once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total
