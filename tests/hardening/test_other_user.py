"""A shared machine is not one user (issue 20 points 2 and 3), with two real Unix users: a victim (a user this module
creates, and removes afterwards) and another local user (``nobody``).

- Everything flashpoint writes (state folder, announcements, job store and its WAL, lease files, want marks, temporary
  folders) is walked as the other user while the victim's ``flashpoint serve`` (with an API key) and a script's
  embedded plane run jobs with secret inputs and log lines: the other user reads no key, no input, no output, no log.
- The attacks on leases, as the other user: a 0600 file and a link planted in lock files' places, a lease whose record
  names the victim, a lease directory made first, want marks naming pid 1 and the victim's own pid, deleting a held
  lock file (the victim's: refused; one of the other user's own, which the victim leased through: leased again). The
  victim still owns its devices, and names the other user's process by the kernel's facts.
- ``flashpoint gpus`` and ``explain`` run as root (with no announcement of their own) and as the other user name the
  victim's process as the holder.

Needs root (to create and become users); skipped otherwise, with the reason. CI runs the suite as root.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import select
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashpoint.fleet.simulated import parse_fleet
from flashpoint.scheduler.ownership.leases import identity, prepare
from tests.conftest import ROOT, start_serve_process, stop_process, until

pytestmark = [pytest.mark.hardening, pytest.mark.slow, pytest.mark.timeout(300)]

FLEET = "NVIDIA_H200:1"
NODE = "node-a"


#: the interpreter other users run flashpoint with (``python_for_users``), and the path that finds flashpoint, its
#: dependencies and this repository's tests there
PYTHON: list[str] = []
PYTHONPATH: list[str] = []


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def env(self, **more: str) -> dict[str, str]:
        """A clean environment for this user's processes (nothing of the test process's own)."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "PYTHONPATH": os.pathsep.join(PYTHONPATH),
            "PYTHONDONTWRITEBYTECODE": "1",
            "FLASHPOINT_NODE": NODE,
            "FLASHPOINT_SIMULATED_GPUS": FLEET,
            "FLASHPOINT_TAKE_HOLD_S": "5",
            **more,
        }

    def run_as(self, command: list[str]) -> list[str]:
        """``command`` run as this user: through util-linux's ``setpriv``, which drops root (every capability, the
        groups) the way a login does."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *command]

    def python(self, *args: str) -> list[str]:
        """This user's interpreter running ``args`` (``python_for_users``), as this user."""
        return self.run_as([PYTHON[0], *args])


@dataclass(frozen=True)
class Users:
    victim: User
    other: User
    #: a folder every user can reach (0755, root's), holding the homes and lease directories
    base: Path


#: what another user's interpreter must import
IMPORTS = "import flashpoint.hosting.server, tests.hardening.leaseuser"


def python_for_users(user: User) -> str | None:
    """Choose the interpreter other users run flashpoint with: this one, else the system's of the same version, on
    a path naming this checkout's ``src``, the repository and this environment's site-packages (a virtual
    environment under root's home is not one other users may execute: their servers start workers with it). The
    probe execs it the way a server starts a worker, without root's capabilities. Returns why none works, or None."""
    PYTHONPATH[:] = [str(ROOT / "src"), str(ROOT), sysconfig.get_paths()["purelib"]]
    why = ""
    for candidate in dict.fromkeys([sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3"]):
        probe = subprocess.run(
            user.run_as(["/bin/sh", "-c", f'exec "$0" -c "{IMPORTS}"', candidate]),
            cwd=ROOT,
            env=user.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if probe.returncode == 0:
            PYTHON[:] = [candidate]
            return None
        why += f"{candidate}: {probe.stderr.strip()[-200:]}; "
    return why


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    if not hasattr(os, "getuid") or os.getuid() != 0:
        pytest.skip("two real Unix users need root, to create one and to become them (CI runs the suite as root)")
    if shutil.which("useradd") is None or shutil.which("userdel") is None or shutil.which("setpriv") is None:
        pytest.skip("useradd, userdel and setpriv (util-linux) are needed to create the victim user and become it")
    base = Path(tempfile.mkdtemp(prefix="flashpoint-users-"))
    os.chmod(base, 0o755)
    name = f"fpvictim{os.getpid()}"[:31]
    home = base / "victim"
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"cannot create a user here: {made.stderr.strip()}")
    try:
        entry, nobody = pwd.getpwnam(name), pwd.getpwnam("nobody")
        home.mkdir(mode=0o755)  # a home other users may enter, as many are: flashpoint must close its own folders
        os.chown(home, entry.pw_uid, entry.pw_gid)
        other_home = base / "other"
        other_home.mkdir(mode=0o755)
        os.chown(other_home, nobody.pw_uid, nobody.pw_gid)
        found = Users(
            User(name, entry.pw_uid, entry.pw_gid, home),
            User("nobody", nobody.pw_uid, nobody.pw_gid, other_home),
            base,
        )
        why = python_for_users(found.victim)
        if why is not None:
            pytest.skip(f"no interpreter other users may run imports flashpoint here: {why}")
        yield found
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


def shared_lease_dir(users: Users, name: str) -> Path:
    """A lease directory as root makes the shared default (1777, root's), with its marks' folder."""
    root = users.base / name
    prepare(root, shared=True)
    prepare(root / "wants", shared=True)
    return root


# ----------------------------------------------------------------------------------------------------------------
# a lease book of another user, driven over stdin (tests/hardening/leaseuser.py)


class Book:
    """A process of ``user`` holding a lease book in ``root`` on the simulated fleet ``fleet``."""

    def __init__(self, user: User, root: Path, fleet: str) -> None:
        self.user = user
        self.proc = subprocess.Popen(
            user.python("-m", "tests.hardening.leaseuser", str(root), fleet),
            cwd=ROOT,
            env=user.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid

    def __call__(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], 60)[0]:
            raise AssertionError(f"{self.user.name}'s lease book did not answer {op} within 60 s")
        line = self.proc.stdout.readline()
        assert line, f"{self.user.name}'s lease book ended (exit {self.proc.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # the lease book ends on end of input
        stop_process(self.proc, None)


@pytest.fixture
def books() -> Iterator[Callable[[User, Path, str], Book]]:
    started: list[Book] = []

    def start(user: User, root: Path, fleet: str) -> Book:
        book = Book(user, root, fleet)
        started.append(book)
        return book

    yield start
    for book in started:
        book.close()


def test_another_user_can_neither_break_nor_fake_the_victims_leases(
    users: Users, books: Callable[[User, Path, str], Book]
) -> None:
    root = shared_lease_dir(users, "shared-attacked")
    fleet = f"{NODE}=NVIDIA_H200:5"
    victim, other = books(users.victim, root, fleet), books(users.other, root, fleet)
    me = victim("info")
    notes = users.victim.home / "notes.txt"
    notes.write_text("keep")
    os.chown(notes, users.victim.uid, users.victim.gid)

    # Given the other user's traps: a 0600 file and a link in two lock files' places, and a lease of their own whose
    # record says it is the victim's (the victim's pid, start time and uid, all readable in /proc)
    other("plant", index=0, how="0600")
    other("plant", index=1, how="symlink", target=str(notes))
    forged = {"version": 1, "pid": me["pid"], "ticks": me["ticks"], "uid": me["uid"], "kind": "flashpoint serve"}
    assert other("forge", index=2, record={**forged, "endpoint": "victims-own", "worker": "w"}) == {"locked": True}

    # When the victim leases each device
    held = [victim("acquire", index=i, endpoint="mine")["held_by"] for i in range(4)]

    # Then the trapped devices are held by the other user (that device only: leases are not "off")
    for index, problem in ((0, "has mode 0600"), (1, "is a symbolic link")):
        assert held[index]["kind"] == "lock file" and held[index]["uid"] == users.other.uid, held[index]
        assert problem in held[index]["command"]
    assert notes.read_text() == "keep" and stat.S_IMODE(notes.stat().st_mode) != 0o666
    # and the forged lease is the other user's process, named by the kernel, not "another plane of this process"
    assert held[2]["pid"] == other.pid and held[2]["kind"] == "process" and held[2]["user"] == "nobody"
    assert held[2]["sameProcess"] is False and held[2]["endpoint"] == ""
    # and the free device is the victim's: the other user sees the victim holding it, and cannot delete its lock file
    assert held[3] is None
    theirs = other("holder", index=3)["held_by"]
    assert (theirs["pid"], theirs["user"], theirs["endpoint"]) == (victim.pid, users.victim.name, "mine")
    lock_file = root / f"{identity(parse_fleet(fleet).devices[3])}.lock"
    assert lock_file.stat().st_uid == users.victim.uid
    assert other("unlink", path=str(lock_file))["error"] == "Operation not permitted"
    assert other("acquire", index=3, endpoint="theirs")["held_by"]["pid"] == victim.pid

    # When the victim leases a device through a lock file the other user made (a good one: 0666), and that user
    # deletes it (a file's owner may, even in a sticky directory) before another process of the victim's asks
    other("plant", index=4, how="0666")
    assert victim("acquire", index=4, endpoint="mine")["held_by"] is None
    lock_4 = root / f"{identity(parse_fleet(fleet).devices[4])}.lock"
    assert other("unlink", path=str(lock_4))["error"] is None
    # Then the victim's next recheck (a plane's, every 0.5 s) leases it again through a new file of its own
    (note,) = victim("recheck")["notes"]
    assert f"a lock file of user nobody (uid {users.other.uid}), was deleted" in note and "leased again" in note
    assert lock_4.stat().st_uid == users.victim.uid
    later = books(users.victim, root, fleet)
    assert later("acquire", index=4, endpoint="later")["held_by"]["pid"] == victim.pid  # one owner still

    # When the other user marks the victim's device as wanted by pid 1, and by the victim's own process
    init_ticks = int(Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19])
    other("forge_mark", index=3, pid=1, token="init", record={"version": 1, "pid": 1, "ticks": init_ticks, "uid": 0})
    other("forge_mark", index=3, pid=me["pid"], token="victim", record={**forged, "endpoint": "forged"})
    # Then neither counts (the file's owner is not the process's user): no idle worker of the victim would stop
    assert victim("wanters", indices=[3]) == {"wanters": []}
    # while a real mark of another process of the victim's user does
    waiting = books(users.victim, root, fleet)
    assert waiting("mark", indices=[3], endpoint="waiting")["marked"]
    (wanter,) = victim("wanters", indices=[3])["wanters"]
    assert (wanter["pid"], wanter["endpoint"]) == (waiting.pid, "waiting")


def test_a_lease_directory_another_user_made_first_is_refused(
    users: Users, books: Callable[[User, Path, str], Book]
) -> None:
    # Given the lease directory made first by the other user (sticky and world-writable: but its owner may delete
    # anyone's lock file there)
    root = users.other.home / "made-first"  # (in /tmp, the default, it would be /tmp/flashpoint-devices)
    subprocess.run(users.other.run_as(["mkdir", "-m", "1777", str(root)]), check=True)
    assert root.stat().st_uid == users.other.uid
    victim = books(users.victim, root, f"{NODE}=NVIDIA_H200:2")
    # Then the victim leases nothing there: every device is held by the untrusted directory, which says what to do
    for index in (0, 1):
        held = victim("acquire", index=index, endpoint="mine")["held_by"]
        assert held["kind"] == "lease directory"
        assert f"belongs to user nobody (uid {users.other.uid}), mode 1777" in held["command"]
        assert "FLASHPOINT_LEASE_DIR" in held["command"]
    assert list(root.iterdir()) == []  # nothing of the victim's for the directory's owner to delete


# ----------------------------------------------------------------------------------------------------------------
# every file flashpoint writes, read as the other user

APP = textwrap.dedent(
    """
    from flashpoint import Endpoint, GpuType

    @Endpoint(name="holder", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    def holder(secret: str) -> dict:
        print(f"working on {secret}-LOGGED", flush=True)
        return {"echo": secret + "-OUTPUT"}
    """
)

#: a script of the victim's: its embedded plane queues a job for the H200 the server's worker holds (at its minimum:
#: it never yields), so it waits busy and keeps a want mark on the device
SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    from app import holder

    async def main() -> None:
        await holder.run(sys.argv[1])
        print("queued", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)

#: the walk, run as the other user: every file under the roots (links not followed), read where it can be
WALK = textwrap.dedent(
    """
    import json, os, sys
    wanted = json.loads(sys.stdin.read())
    readable, leaks, closed = [], [], []
    for root in wanted["roots"]:
        for folder, dirs, files in os.walk(root, onerror=lambda e: closed.append(e.filename)):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    data = os.read(fd, 4 << 20)
                except OSError:
                    continue
                finally:
                    os.close(fd)
                readable.append(path)
                leaks.extend([path, s] for s in wanted["secrets"] if s.encode() in data)
    print(json.dumps({"readable": readable, "leaks": leaks, "closed": closed}))
    """
)


def _as_victim_file(users: Users, path: Path, text: str) -> None:
    path.write_text(text)
    os.chown(path, users.victim.uid, users.victim.gid)


def _run_as(user: User, args: list[str], stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        user.python(*args),
        cwd=ROOT,
        env=user.env(**env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_another_user_reads_nothing_secret_of_what_flashpoint_writes(users: Users, tmp_path: Path) -> None:
    victim, other = users.victim, users.other
    leases = shared_lease_dir(users, "shared-walked")
    project = victim.home / "project"
    project.mkdir(mode=0o755)
    os.chown(project, victim.uid, victim.gid)
    _as_victim_file(users, project / "app.py", APP)
    _as_victim_file(users, project / "script.py", SCRIPT)
    token = secrets.token_hex(6)
    key, secret, script_secret = f"victim-key-{token}", f"input-{token}", f"script-input-{token}"
    env = victim.env(FLASHPOINT_LEASE_DIR=str(leases))
    before = set(Path(tempfile.gettempdir()).iterdir())

    # Given the victim's `flashpoint serve` with an API key, its job store in the project's .flashpoint folder
    command = ["-m", "flashpoint", "serve", str(project / "app.py"), "--api-key", key, "--port", "0"]
    command += ["--db", str(project / ".flashpoint" / "jobs.db")]
    server, url = start_serve_process(victim.python(*command), env)
    script: subprocess.Popen[str] | None = None
    try:
        headers = {"Authorization": f"Bearer {key}"}
        # with a job carrying a secret input, whose worker logs a line and answers with it
        job = httpx.post(f"{url}/v2/holder/run", json={"input": {"secret": secret}}, headers=headers, timeout=30)
        job.raise_for_status()
        status_url = f"{url}/v2/holder/status/{job.json()['id']}"

        def done() -> dict[str, Any] | None:
            body: dict[str, Any] = httpx.get(status_url, headers=headers, timeout=30).json()
            return body if body["status"] in ("COMPLETED", "FAILED") else None

        finished = until(done, 120, "the server's job to finish")
        assert (
            finished is not None
            and finished["status"] == "COMPLETED"
            and finished["output"] == {"echo": f"{secret}-OUTPUT"}
        )
        # and a script of the victim's, whose embedded plane queues a job with another secret and waits for the H200
        script = subprocess.Popen(
            victim.python("script.py", script_secret),
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert script.stdout is not None
        assert select.select([script.stdout], [], [], 120)[0] and script.stdout.readline() == "queued\n"
        until(lambda: list((leases / "wants").glob("*.want-*")), 60, "the script's want mark")
        announcements = until(lambda: [*(victim.home / ".flashpoint" / "run").glob("*.json")], 30, "announcements")
        minted = [json.loads(p.read_text()).get("key") for p in announcements]
        hidden = [key, secret, f"{secret}-OUTPUT", script_secret, *[k for k in minted if k]]

        # When the other user reads everything flashpoint wrote: the victim's home (state folder, announcements,
        # job store, environments), the lease directory (lock files, want marks) and the victim's temporary folders
        temporary = [p for p in set(Path(tempfile.gettempdir()).iterdir()) - before if p.stat().st_uid == victim.uid]
        roots = [str(victim.home), str(leases), *map(str, temporary)]
        walked = _run_as(other, ["-c", WALK], json.dumps({"roots": roots, "secrets": hidden}))
        assert walked.returncode == 0, walked.stderr
        found = json.loads(walked.stdout)

        # Then no key, input, output or log line reached it
        assert found["leaks"] == []
        # it read the lease records (its own flashpoint needs them), and nothing of the state folder or job store
        assert any(path.startswith(str(leases)) and path.endswith(".lock") for path in found["readable"])
        private = (str(victim.home / ".flashpoint"), str(project / ".flashpoint"))
        assert [path for path in found["readable"] if path.startswith(private)] == []
        assert {str(victim.home / ".flashpoint"), str(project / ".flashpoint")} <= set(found["closed"])
        # the modes say so: folders 0700, the job store and its WAL 0600, announcements 0600
        assert _mode(victim.home / ".flashpoint") == 0o700 and _mode(project / ".flashpoint") == 0o700
        store = sorted((project / ".flashpoint").iterdir())
        assert [p.name for p in store] == ["jobs.db", "jobs.db-shm", "jobs.db-wal"]
        assert {_mode(p) for p in store} == {0o600} and {_mode(p) for p in announcements} == {0o600}
        # and the lease record shows the server's command line without its key
        (record,) = [json.loads(p.read_text()) for p in leases.glob("*.lock") if p.read_text()]
        assert "app.py --api-key *** --port 0" in record["command"] and record["pid"] == server.pid

        # And `flashpoint gpus` run by root (no announcement of its own) and by the other user names the victim's
        # server as the H200's holder, with its user; `explain` without a plane says so too
        root_env = {**os.environ, "FLASHPOINT_LEASE_DIR": str(leases), "FLASHPOINT_NODE": NODE}
        root_env.update({"FLASHPOINT_SIMULATED_GPUS": FLEET, "FLASHPOINT_STATE_DIR": str(tmp_path / "root-state")})
        as_root = subprocess.run(
            [sys.executable, "-m", "flashpoint", "gpus", "--json"], env=root_env, capture_output=True, text=True
        )
        as_other = _run_as(other, ["-m", "flashpoint", "gpus", "--json"], FLASHPOINT_LEASE_DIR=str(leases))
        for answer in (as_root, as_other):
            assert answer.returncode == 0, answer.stderr
            (row,) = json.loads(answer.stdout)["fleets"][0]["devices"]
            process = row["process"]
            # serve APP's endpoints are the app named after APP's folder (decision 0106)
            assert (process["pid"], process["user"], process["endpoint"]) == (
                server.pid,
                victim.name,
                "project.production.holder",
            )
            assert key not in answer.stdout
        explained = _run_as(other, ["-m", "flashpoint", "explain"], FLASHPOINT_LEASE_DIR=str(leases))
        assert f"pid {server.pid} of user {victim.name}" in explained.stderr
    finally:
        if script is not None:
            stop_process(script)
        stop_process(server)
