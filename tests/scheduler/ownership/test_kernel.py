"""The kernel's word on lease holders (scheduler/kernel.py, scheduler/leaserecords.py): /proc/locks parsed by a table,
holders named from kernel facts by a table, and a real child process holding a lease whose record was forged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashpoint.explain import KERNEL_FACTS, OtherProcess
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.scheduler.ownership import kernel
from flashpoint.scheduler.ownership.kernel import LockLine, ProcessFacts, flock_holders, parse_locks
from flashpoint.scheduler.ownership.leaserecords import name_holder
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner, identity
from tests.scheduler.ownership.test_leases import _record
from tests.scheduler.ownership.test_leases_holder import end_holder, start_holder

linux = pytest.mark.skipif(not kernel.HAVE_PROC, reason="the kernel's facts come from Linux's /proc")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146314 0 EOF", LockLine(4242, True, 0xFE, 0, 2146314)),
        ("5: FLOCK  ADVISORY  READ  99 08:01:1234 0 EOF", LockLine(99, False, 8, 1, 1234)),
        ("7: FLOCK  ADVISORY  WRITE 0 103:0a:12 0 EOF", LockLine(0, True, 0x103, 0x0A, 12)),  # another PID namespace
        ("2: -> FLOCK  ADVISORY  WRITE 4343 fe:00:2146314 0 EOF", None),  # a blocked waiter holds nothing
        ("3: POSIX  ADVISORY  WRITE 678 00:19:55 0 EOF", None),
        ("4: OFDLCK ADVISORY  READ  -1 08:01:22 0 EOF", None),
        ("6: LEASE  ACTIVE    READ  88 08:01:77 0 EOF", None),
        ("8: FLOCK  ADVISORY  WRITE x 08:01:1 0 EOF", None),
        ("9: FLOCK  ADVISORY  WRITE 1 08:01 0 EOF", None),
        ("10: FLOCK  ADVISORY  UNLCK 1 08:01:1 0 EOF", None),
        ("garbage", None),
        ("", None),
    ],
)
def test_parse_locks(line: str, expected: LockLine | None) -> None:
    assert parse_locks(line) == ([expected] if expected else [])


def test_flock_holders_match_the_file_and_fall_back_to_its_inode_on_one_device() -> None:
    text = "\n".join(
        [
            "1: FLOCK  ADVISORY  WRITE 10 fe:00:500 0 EOF",
            "2: FLOCK  ADVISORY  READ  11 fe:01:500 0 EOF",
            "3: FLOCK  ADVISORY  WRITE 12 08:01:600 0 EOF",
        ]
    )
    assert [line.pid for line in flock_holders(text, os.makedev(0xFE, 0), 500)] == [10]
    # stat's device differs from the one /proc/locks prints (a btrfs subvolume): the inode on one device decides
    assert [line.pid for line in flock_holders(text, os.makedev(0x99, 0), 600)] == [12]
    assert flock_holders(text, os.makedev(0x99, 0), 500) == []  # that inode on two devices: nobody is sure
    assert flock_holders(text, os.makedev(0xFE, 0), 700) == []


FACTS = ProcessFacts(4242, 1000, 777)


@pytest.mark.parametrize(
    ("data", "facts", "own_uid", "expected"),
    [
        # the record is the holder's own: it describes the holder
        (
            _record(uid=1000, ticks=777),
            FACTS,
            1000,
            OtherProcess(
                4242,
                "flashpoint serve",
                "flashpoint serve app.py",
                "http://127.0.0.1:8000",
                "infer",
                "infer-w1-abc",
                uid=1000,
            ),
        ),
        # another user's: named with the user
        (
            _record(uid=0, ticks=777),
            ProcessFacts(4242, 0, 777),
            1000,
            OtherProcess(
                4242,
                "flashpoint serve",
                "flashpoint serve app.py",
                "http://127.0.0.1:8000",
                "infer",
                "infer-w1-abc",
                user="root",
                uid=0,
            ),
        ),
        # a record that is not the holder's (another pid, start time, uid; none at all): kernel facts alone
        (_record(pid=4243, uid=1000, ticks=777), FACTS, 1000, None),
        (_record(uid=1000, ticks=778), FACTS, 1000, None),
        (_record(uid=0, ticks=777), FACTS, 1000, None),
        (_record(uid=1000), FACTS, 1000, None),
        (_record(uid=1000, ticks=None), FACTS, 1000, None),
        (b"", FACTS, 1000, None),
        (b"{not json", FACTS, 1000, None),
    ],
)
def test_name_holder(data: bytes, facts: ProcessFacts, own_uid: int, expected: OtherProcess | None) -> None:
    named = name_holder(4242, facts, data, own_pid=1, own_uid=own_uid)
    if expected is None:
        expected = OtherProcess(4242, KERNEL_FACTS, user=kernel.user_name(facts.uid), uid=facts.uid)
        assert named.label == f"another process: pid 4242 of user {expected.user} (its lease record does not name it)"
    assert named == expected


def test_name_holder_without_a_process() -> None:
    gone = name_holder(4242, None, _record(), own_pid=1, own_uid=0)
    assert gone.pid == 4242 and gone.kind == KERNEL_FACTS and "has exited" in gone.label
    hidden = name_holder(0, None, _record(), own_pid=1, own_uid=0)
    assert hidden.pid == 0 and "another PID namespace" in hidden.label


@linux
def test_process_facts() -> None:
    facts = kernel.process_facts(os.getpid())
    assert facts == ProcessFacts(os.getpid(), os.getuid(), kernel.process_ticks())
    assert facts is not None and facts.ticks is not None
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert kernel.process_facts(int(finished.stdout)) is None
    assert kernel.process_facts(0) is None and kernel.process_facts(-1) is None
    assert kernel.process_uid(1) == 0  # init is root's, whoever asks


@linux
def test_the_kernel_names_a_child_holding_a_lease_whatever_its_record_says(tmp_path: Path) -> None:
    # Given a child process holding the lease of a simulated H200
    fleet = "node-a=NVIDIA_H200:1"
    (dev,) = parse_fleet(fleet).devices
    name = identity(dev)
    assert name is not None
    child = start_holder(tmp_path, fleet, "infer")
    try:
        lock = tmp_path / f"{name}.lock"
        info = lock.stat()
        text = kernel.locks_text()
        assert text is not None
        (line,) = flock_holders(text, info.st_dev, info.st_ino)
        assert (line.pid, line.exclusive) == (child.pid, True)
        me = Owner(os.getpid(), kernel.process_started(), "script", "job.py", "", kernel.process_ticks())
        reader = DeviceLeases(me, tmp_path)
        # its own record describes it
        held_by = reader.holder(name)
        assert held_by is not None and (held_by.pid, held_by.endpoint, held_by.kind) == (child.pid, "infer", "script")
        # When someone rewrites the record (lock files are 0666) to name this very process
        lock.write_bytes(_record(pid=os.getpid(), uid=os.getuid(), ticks=kernel.process_ticks(), endpoint="forged"))
        # Then the holder is still the child, named by the kernel alone: not "another plane of this process"
        forged = reader.holder(name)
        assert forged == OtherProcess(child.pid, KERNEL_FACTS, user=kernel.user_name(os.getuid()), uid=os.getuid()), (
            forged
        )
        assert reader.acquire(name, dev, "mine", "mine-w1") == forged
    finally:
        end_holder(child)
    assert reader.holder(name) is None
