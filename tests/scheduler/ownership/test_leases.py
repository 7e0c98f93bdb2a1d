"""Device leases (scheduler/leases.py): the pure parts as tables, the lock files with real locks, and two real
processes (a child holds a lease; the parent sees it busy with the child's pid; SIGKILL frees it at once). Simulated
devices are the only fake."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import flashpoint
from flashpoint.explain import Code, OtherProcess, WaitReason
from flashpoint.fleet.inventory import Device, Holder
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.gpus import GPUModel, GpuType, model_of
from flashpoint.scheduler.ownership import kernel
from flashpoint.scheduler.ownership.leaserecords import redact
from flashpoint.scheduler.ownership.leases import (
    DEFAULT_LEASE_DIR,
    UNREADABLE,
    DeviceLeases,
    Owner,
    command_line,
    identity,
    lease_dir,
    prepare,
    process_alive,
    process_kind,
    read_record,
)
from flashpoint.scheduler.placement.fit import Fit, NoFit, Yielders, place
from flashpoint.scheduler.placement.index import FleetIndex
from tests.scheduler.ownership.test_leases_holder import end_holder, start_holder

H200 = model_of(GpuType.NVIDIA_H200)
A100 = model_of(GpuType.NVIDIA_A100_80GB_PCIe)


def device(
    node: str = "node-a", index: int = 0, model: GPUModel = H200, *, simulated: bool = True, uuid: str = ""
) -> Device:
    """A device as fleet discovery makes it: simulated ones get ``SIM-<node>-<index>``, real ones their NVML UUID."""
    return Device(node, index, model.name, model, 141 * 1024, simulated, uuid or f"SIM-{node}-{index}")


def owner(pid: int = 4242, kind: str = "flashpoint serve", url: str = "http://127.0.0.1:8000") -> Owner:
    return Owner(pid, 1.0, kind, f"{kind} app.py", url)


#: what a lease record of `flashpoint serve` names
SERVE = OtherProcess(
    4242, "flashpoint serve", "flashpoint serve app.py", "http://127.0.0.1:8000", "infer", "infer-w1-abc"
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "leases"


# ----------------------------------------------------------------------------------------------------------------
# identity: which devices are leased, and by what name


def test_same_simulated_device_of_two_processes_has_one_identity() -> None:
    # Given two processes declaring the same simulated fleet (each parses it on its own)
    first, second = parse_fleet("NVIDIA_H200:2", node="box").devices, parse_fleet("NVIDIA_H200:2", node="box").devices
    # Then each device has one identity in both, and the two devices differ
    assert [identity(d) for d in first] == [identity(d) for d in second]
    assert len({identity(d) for d in first}) == 2


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (device(node="node-b"), "another node"),
        (device(model=A100), "another model"),
        (device(index=1), "another index"),
    ],
)
def test_simulated_devices_of_different_fleets_do_not_collide(other: Device, why: str) -> None:
    assert identity(other) != identity(device()), why


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        # a real GPU of this machine: its NVML UUID, whatever its index or node name
        (device(simulated=False, uuid="GPU-8f6c2b1a-1234-5678"), "GPU-8f6c2b1a-1234-5678"),
        (device(node="other-name", index=3, simulated=False, uuid="GPU-abc"), "GPU-abc"),
        (device(simulated=False, uuid="MIG-abc"), "MIG-abc"),
        # a Ray cluster's devices (Ray hands out ids of its own choosing): not this machine's to lease
        (device(simulated=False, uuid="0f3a9c:0"), None),
        (device(simulated=True, uuid="0f3a9c:0"), None),
        # a device with no uuid (a list built by hand), or one whose uuid is not a safe file name
        (Device("node-a", 0, "NVIDIA H200", H200, 0, False), None),
        (Device("node-a", 0, "NVIDIA H200", H200, 0, True), None),
        (device(simulated=False, uuid="GPU-../../etc"), None),
    ],
)
def test_identity(found: Device, expected: str | None) -> None:
    assert identity(found) == expected


def test_a_simulated_identity_is_a_safe_file_name() -> None:
    name = identity(device(node="gpu.box_1-a", model=A100, index=12))
    assert name is not None and name.startswith("sim-gpu.box_1-a-NVIDIA_A100_80GB_PCIe-12-")
    assert all(c.isalnum() or c in "._-" for c in name)


# ----------------------------------------------------------------------------------------------------------------
# who a process is, and its record


@pytest.mark.parametrize(
    ("argv", "server", "kind"),
    [
        (["/venv/bin/flashpoint", "serve", "app.py"], False, "flashpoint serve"),
        (["/venv/lib/python3.11/site-packages/flashpoint/__main__.py", "serve", "app.py"], True, "flashpoint serve"),
        (["/venv/bin/flashpoint", "dev", "."], False, "flashpoint dev"),
        (["job.py"], False, "script"),
        (["job.py", "serve"], False, "script"),  # a script's own argument is not the command
        (["-c"], True, "flashpoint serve"),  # an in-process Server: a durable plane
        ([], False, "script"),
    ],
)
def test_process_kind(argv: list[str], server: bool, kind: str) -> None:
    assert process_kind(argv, server) == kind


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["/venv/lib/python3.11/site-packages/flashpoint/__main__.py", "serve", "app.py"], "flashpoint serve app.py"),
        ([], ""),
        # a script's own arguments are its data: only its name is shown
        (["/home/me/job.py", "--fast", "s3cret-input"], "job.py"),
        (["-c", "print(1)"], "-c"),
        # serve and dev keep their own arguments, credentials hidden
        (["/venv/bin/flashpoint", "serve", "app.py", "--api-key", "s3cret"], "flashpoint serve app.py --api-key ***"),
        (["flashpoint", "dev", ".", "--port=8888"], "flashpoint dev . --port=8888"),
        (["flashpoint", "serve", "x" * 300], "flashpoint serve " + "x" * 140 + "..."),
        # another flashpoint command: its name and first argument
        (["/venv/bin/flashpoint", "run", "job.py", "--input", "s3cret"], "flashpoint run job.py"),
        (["flashpoint", "jobs", "--key", "k1"], "flashpoint jobs"),
    ],
)
def test_command_line(argv: list[str], text: str) -> None:
    assert command_line(argv) == text


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--api-key", "s3cret", "--port", "9"], "--api-key *** --port 9"),
        (["--api-key=s3cret"], "--api-key=***"),
        (["--key", "k1", "--url", "http://h:1"], "--key *** --url http://h:1"),
        (
            ["--hf-token", "t", "--DB_PASSWORD", "p", "--client-secret=c"],
            "--hf-token *** --DB_PASSWORD *** --client-secret=***",
        ),
        (["--keys", "a,b", "--api-keys=a"], "--keys *** --api-keys=***"),
        (["--api-key"], "--api-key"),  # nothing follows: nothing to hide
        (["--monkey-count", "3", "key", "token"], "--monkey-count 3 key token"),  # not credential options
        (["--url", "https://me:pw@example.com/x"], "--url https://me:***@example.com/x"),
        (["--ray-address=redis://:pw@host:6379/0"], "--ray-address=redis://:***@host:6379/0"),
    ],
)
def test_redact(argv: list[str], shown: str) -> None:
    assert " ".join(redact(argv)) == shown


def _record(**fields: object) -> bytes:
    found = {
        "version": 1,
        "pid": 4242,
        "uid": 0,
        "kind": "flashpoint serve",
        "command": "flashpoint serve app.py",
        "url": "http://127.0.0.1:8000",
        "endpoint": "infer",
        "worker": "infer-w1-abc",
    }
    found.update(fields)
    return json.dumps(found).encode()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", None),
        (b'{"pid": 42', None),  # torn
        (b"[1, 2]", None),
        (_record(pid=0), None),
        (_record(pid="x"), None),
        (_record(), dataclasses.replace(SERVE, uid=0)),
        (_record(extra=True), dataclasses.replace(SERVE, uid=0)),
        (_record(uid=None), SERVE),
        # the reader's own pid: another plane of this very process
        (_record(pid=99), dataclasses.replace(SERVE, pid=99, same_process=True, uid=0)),
    ],
)
def test_read_record(data: bytes, expected: OtherProcess | None) -> None:
    assert read_record(data, own_pid=99, own_uid=0) == expected


def test_a_record_of_another_user_names_the_user() -> None:
    found = read_record(_record(uid=0), own_pid=1, own_uid=12345)
    assert found is not None and found.user == "root"
    assert "pid 4242 of user root" in found.label


@pytest.mark.parametrize(
    ("process", "label"),
    [
        (
            SERVE,
            "another flashpoint process: pid 4242 (flashpoint serve app.py, at http://127.0.0.1:8000), endpoint infer "
            "(worker infer-w1-abc)",
        ),
        (OtherProcess(7, "script"), "another flashpoint process: pid 7 (script)"),
        (
            OtherProcess(7, "script", "job.py", same_process=True),
            "another control plane of this process: pid 7 (job.py)",
        ),
        (UNREADABLE, "another flashpoint process (its lease record is not written yet or cannot be read)"),
    ],
)
def test_label(process: OtherProcess, label: str) -> None:
    assert process.label == label


def test_a_busy_reason_carries_the_processes_in_json() -> None:
    process = OtherProcess(4242, "script", "job.py", "http://127.0.0.1:1", "infer", "infer-w1")
    reason = WaitReason("NVIDIA H200", Code.BUSY, "all held by ...", ("mine",), (process,))
    body = reason.to_json()
    assert body["holders"] == ["mine"]
    assert body["processes"] == [
        {
            "pid": 4242,
            "kind": "script",
            "command": "job.py",
            "url": "http://127.0.0.1:1",
            "endpoint": "infer",
            "worker": "infer-w1",
            "user": "",
            "sameProcess": False,
            "uid": None,
        }
    ]
    assert OtherProcess.from_json(body["processes"][0]) == process


def test_lease_dir() -> None:
    assert lease_dir({}) == Path(DEFAULT_LEASE_DIR)
    assert lease_dir({"FLASHPOINT_LEASE_DIR": " "}) == Path(DEFAULT_LEASE_DIR)
    assert lease_dir({"FLASHPOINT_LEASE_DIR": "/var/run/fp"}) == Path("/var/run/fp")


# ----------------------------------------------------------------------------------------------------------------
# placement: devices another process holds (pure)


def test_placement_passes_over_a_device_another_process_holds_and_names_it() -> None:
    # Given two H200s, the first held by another flashpoint process
    first, second = device(index=0), device(index=1)
    index = FleetIndex([first, second])
    other = OtherProcess(4242, "flashpoint serve", "flashpoint serve app.py", "http://127.0.0.1:8000", "infer", "w1")
    index.hold_foreign(first, other)
    index.verify()
    # Then a worker of one H200 goes to the second
    fit = place([H200], 1, index)
    assert isinstance(fit, Fit) and fit.devices == (second,)
    # And with both taken (the second by this plane's own endpoint), the reason names both holders
    index.hold((second,), Holder("w2", "mine"))
    nofit = place([H200], 1, index)
    assert isinstance(nofit, NoFit) and not nofit.never
    (reason,) = nofit.reasons
    assert reason.code is Code.BUSY and reason.holders == ("mine",) and reason.processes == (other,)
    assert reason.detail == f"all held by mine, {other.label}"
    # And once released, the device is free again and the process forgotten
    index.release((first,))
    index.release((second,))
    assert index.foreign() == [] and index.process(other.label) is None
    index.verify()


def test_devices_another_process_holds_never_yield_and_survive_a_fleet_change() -> None:
    first, second = device(index=0), device(index=1)
    index = FleetIndex([first, second])
    other = OtherProcess(7, "script", "job.py")
    index.hold_foreign(first, other)
    index.hold_foreign(second, other)
    # the planner names only this plane's idle workers as yielders: another process's devices are never reclaimed
    nofit = place([H200], 1, index, Yielders([Holder("w9", "idle")]))
    assert isinstance(nofit, NoFit) and nofit.reasons[0].processes == (other,)
    # a fleet change keeps the holder of a device still present, and drops the one that left
    index.replace([first])
    assert index.foreign() == [(first, other)]
    index.verify()
    with pytest.raises(ValueError, match="already held"):
        index.hold_foreign(first, other)


# ----------------------------------------------------------------------------------------------------------------
# the lock files, in one process (two lease books are two holders, as two planes of one process are)


def me(kind: str = "flashpoint serve", url: str = "http://127.0.0.1:8000") -> Owner:
    """This process, as a plane of it names itself: its pid and start time are the kernel's, so a reader believes its
    records (another lease book of this process is another plane of it)."""
    return Owner(os.getpid(), kernel.process_started(), kind, f"{kind} app.py", url, kernel.process_ticks())


def test_a_lease_is_taken_named_and_given_back(root: Path) -> None:
    dev = device()
    name = identity(dev)
    assert name is not None
    mine, theirs = DeviceLeases(me("script", "http://127.0.0.1:9"), root), DeviceLeases(me(), root)
    assert theirs.acquire(name, dev, "infer", "infer-w1") is None
    # the kernel names the holder (this process: another plane of it), its own record describes it
    named = dataclasses.replace(SERVE, pid=os.getpid(), worker="infer-w1", same_process=True, uid=os.getuid())
    assert mine.holder(name) == named
    assert mine.acquire(name, dev, "other", "other-w1") == named
    record = json.loads((root / f"{name}.lock").read_text())
    assert record["device"] == {"identity": name, "node": "node-a", "index": 0, "model": "NVIDIA H200"}
    # a lease its holder gives back is free at once, its record emptied
    theirs.release(name)
    assert mine.holder(name) is None and (root / f"{name}.lock").read_text() == ""
    assert mine.acquire(name, dev, "other", "other-w1") is None
    assert mine.held() == (name,) and theirs.holder(name) is not None
    with pytest.raises(ValueError, match="already"):
        mine.acquire(name, dev, "other", "other-w2")
    mine.close()
    assert mine.held() == () and theirs.holder(name) is None


def test_a_stale_record_is_nobody(root: Path) -> None:
    # Given a lock file whose record names a process, but whose lock nobody holds (written and left)
    dev = device()
    name = identity(dev)
    assert name is not None
    prepare(root, shared=False)
    (root / f"{name}.lock").write_bytes(_record(pid=4242))
    # Then nobody holds it, and it is taken
    leases = DeviceLeases(owner(), root)
    assert leases.holder(name) is None
    assert leases.acquire(name, dev, "infer", "w1") is None
    leases.close()


def test_the_shared_default_directory_is_sticky_and_world_writable_and_lock_files_are_for_everyone(root: Path) -> None:
    old = os.umask(0o022)
    try:
        prepare(root, shared=True)
        leases = DeviceLeases(owner(), root)
        name = identity(device())
        assert name is not None and leases.acquire(name, device(), "infer", "w1") is None
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o1777
    assert stat.S_IMODE((root / f"{name}.lock").stat().st_mode) == 0o666
    leases.close()


def test_a_directory_named_by_the_variable_is_made_private(root: Path) -> None:
    old = os.umask(0o002)  # a umask that would leave it group-writable: refused by the trust rule
    try:
        leases = DeviceLeases(owner(), root)
        name = identity(device())
        assert name is not None and leases.acquire(name, device(), "infer", "w1") is None
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    leases.close()


# ----------------------------------------------------------------------------------------------------------------
# two real processes


def test_a_lease_held_by_a_child_process_is_busy_with_its_pid_and_free_at_once_when_it_is_killed(root: Path) -> None:
    # Given a child process holding the lease of a simulated H200
    fleet = "node-a=NVIDIA_H200:1"
    (dev,) = parse_fleet(fleet).devices
    name = identity(dev)
    assert name is not None
    child = start_holder(root, fleet, "infer")
    try:
        # Then this process sees it held, by the child's pid, for its endpoint
        leases = DeviceLeases(owner(pid=os.getpid()), root)
        held_by = leases.acquire(name, dev, "mine", "mine-w1")
        assert held_by is not None and held_by.pid == child.pid and held_by.endpoint == "infer"
        assert held_by.kind == "script" and not held_by.same_process and leases.holder(name) == held_by
    finally:
        # When the child is killed with SIGKILL
        end_holder(child, kill=True)
    # Then the lease is free at once (no stale lock), and taken
    assert leases.holder(name) is None
    assert leases.acquire(name, dev, "mine", "mine-w1") is None
    leases.close()


def test_a_child_that_lets_go_frees_its_lease(root: Path) -> None:
    fleet = "node-a=NVIDIA_H200:2"
    devices = parse_fleet(fleet).devices
    child = start_holder(root, fleet, "infer", 1)
    leases = DeviceLeases(owner(pid=os.getpid()), root)
    names = [identity(d) for d in devices]
    assert names[0] is not None and names[1] is not None
    assert leases.holder(names[0]) is None and leases.holder(names[1]) is not None
    end_holder(child)
    assert leases.holder(names[1]) is None


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A directory every user can reach, holding the lease directory (pytest's own temp dirs are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="flashpoint-leases-"))
    os.chmod(base, 0o755)
    yield base / "devices"
    subprocess.run(["rm", "-rf", str(base)], check=False)


def _become_nobody() -> None:
    os.setgid(NOBODY)
    os.setuid(NOBODY)


#: the user (and group) another user's process runs as
NOBODY = 65534


def _python_for_nobody() -> tuple[str, dict[str, str]]:
    """An interpreter that user nobody can run and that imports flashpoint's lease module (this venv's may live under
    root's home); skips the test when there is none."""
    env = {"PYTHONPATH": str(Path(flashpoint.__file__).resolve().parents[1]), "PYTHONDONTWRITEBYTECODE": "1"}
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            probe = subprocess.run(
                [python, "-c", "import flashpoint.scheduler.ownership.leases"],
                env=env,
                preexec_fn=_become_nobody,
                capture_output=True,
                timeout=60,
            )
        except OSError:
            continue
        if probe.returncode == 0:
            return python, env
    pytest.skip("no interpreter that user nobody can run imports flashpoint here")


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="switching users needs root")
def test_two_users_share_the_default_directory_and_exclude_each_other(world_dir: Path) -> None:
    python, env = _python_for_nobody()
    # Given the lease directory made by root the way the default is (1777), and root's lease file made (0666)
    prepare(world_dir, shared=True)
    dev = device()
    name = identity(dev)
    assert name is not None
    mine = DeviceLeases(owner(pid=os.getpid()), world_dir)
    assert mine.acquire(name, dev, "infer", "w1") is None
    mine.release(name)
    # When another user (nobody) takes the same lease through root's file (opened without O_CREAT)
    code = (
        "import sys; from pathlib import Path; from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner; "
        "from flashpoint.fleet.inventory import Device; from flashpoint.gpus import GpuType, model_of; "
        "d = Device('node-a', 0, 'NVIDIA H200', model_of(GpuType.NVIDIA_H200), 0, True, 'SIM-node-a-0'); "
        f"l = DeviceLeases(Owner.this_process('script', ''), Path({str(world_dir)!r})); "
        f"print(l.acquire({name!r}, d, 'theirs', 'theirs-w1'), repr(l.off), flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [python, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_become_nobody,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "None ''"  # taken, leases on
        # Then root sees it busy, named with the other user
        held_by = mine.holder(name)
        assert held_by is not None and held_by.pid == child.pid and held_by.user == "nobody"
        assert held_by.endpoint == "theirs"
        assert mine.acquire(name, dev, "infer", "w1") == held_by
    finally:
        end_holder(child)
    assert mine.holder(name) is None


def test_process_alive() -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert process_alive(os.getpid()) is True
    assert process_alive(1) is True  # init: another user's (or root's) process still counts
    for gone in (int(finished.stdout), 0, -1):
        assert process_alive(gone) is False, gone
