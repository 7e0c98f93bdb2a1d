"""Why a worker ended: by itself (a failed start, if it never pulled) or from outside (a lost worker)."""

from __future__ import annotations

import signal

import pytest

from flashpoint.scheduler.exits import describe_exit, failed_by_itself


@pytest.mark.parametrize(
    ("code", "by_itself", "text"),
    [
        (0, True, "exit code 0"),
        (1, True, "exit code 1"),
        (-signal.SIGSEGV, True, "killed by SIGSEGV"),
        (-signal.SIGABRT, True, "killed by SIGABRT"),
        (-signal.SIGBUS, True, "killed by SIGBUS"),
        (-signal.SIGFPE, True, "killed by SIGFPE"),
        (-signal.SIGKILL, False, "killed by SIGKILL"),  # the OOM killer, kill -9
        (-signal.SIGTERM, False, "killed by SIGTERM"),
        (-signal.SIGINT, False, "killed by SIGINT"),
        (-signal.SIGHUP, False, "killed by SIGHUP"),
        (-signal.SIGUSR1, False, "killed by SIGUSR1"),
        (-200, False, "killed by signal 200"),
    ],
)
def test_exit_classification(code: int, by_itself: bool, text: str) -> None:
    assert failed_by_itself(code) is by_itself
    assert describe_exit(code) == text


def test_a_backends_words_replace_the_code_of_a_process_lost_from_sight() -> None:
    # a Ray actor that died reports no exit status: the backend's words, never "killed by SIGHUP" (-1 is no signal)
    cause = "its Ray node 10.0.0.5/ab12cd34 is away (its raylet at 10.0.0.5:40805 stopped answering)"
    assert describe_exit(-1, cause) == cause
    assert describe_exit(-signal.SIGHUP) == "killed by SIGHUP"  # a real SIGHUP is still said as one
