"""The CLI sees every plane: announcements of scripts and servers, ``--url``/``--key``, ``status``, the job commands
(``jobs``, ``job``, ``logs``, ``cancel``, ``retry``, ``call``), ``--watch`` and shell completion, against a live
embedded plane in this process (jobs for a GPU the fleet lacks wait, so no worker starts)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashpoint import ConfigError, Endpoint, GpuType, InvalidTransitionError, NotFoundError
from flashpoint.cli import app
from flashpoint.cli.live import DEV, SERVER, URL, Unreachable, describe, live_planes
from flashpoint.cli.target import planes
from flashpoint.config import Settings
from flashpoint.errors import BadInputError
from flashpoint.hosting import announce
from flashpoint.hosting.embedded import EmbeddedServer
from flashpoint.sdk import default_connection

FLEET = "NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2"
JOB_ID = re.compile(r"^[0-9a-f]{24}-fp$")

runner = CliRunner()


def cli_env(tmp_path: Path) -> dict[str, str | None]:
    return {
        "FLASHPOINT_SIMULATED_GPUS": FLEET,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_NODE": "node-a",
        "FLASHPOINT_CPUS": "3",
        "FLASHPOINT_MEMORY_GB": "12",
        # a shell's client-mode settings must not leak into these tests
        "FLASHPOINT_URL": None,
        "FLASHPOINT_API_KEY": None,
    }


def flat(text: str) -> str:
    """Text of a usage error box, its lines joined: rich wraps it to the terminal's width."""
    return " ".join(text.replace("│", " ").split())


def invoke(tmp_path: Path, *args: str, **env: str | None) -> Any:
    return runner.invoke(app, list(args), env={**cli_env(tmp_path), **env})


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A live embedded plane announcing itself under tmp_path, as a running script's does; the SDK's connection."""
    env = {k: v for k, v in cli_env(tmp_path).items() if v is not None}
    started = EmbeddedServer(Settings.load(env={**env, "FLASHPOINT_TAKE_HOLD_S": "5"})).start()
    default_connection.use(started)
    try:
        yield started
    finally:
        default_connection.use(None)
        started.close()


@Endpoint(name="needs-b200", gpu=GpuType.NVIDIA_B200)
async def needs_b200(data: dict[str, Any]) -> dict[str, Any]:
    return data


@pytest.fixture
async def waiting(embedded: EmbeddedServer) -> str:
    """The id of a job that waits IN_QUEUE for good: the fleet has no B200."""
    job = await needs_b200.run({"x": 1})
    return job.id


pytestmark = pytest.mark.usefixtures("restore_imports")


# --------------------------------------------------------------------------------------------------------------------
# announcements and targets


def test_a_server_announcement_says_what_it_serves_and_is_private(tmp_path: Path) -> None:
    state = tmp_path / "state"

    path = announce.write(state, announce.Announcement(announce.SERVER, "http://127.0.0.1:8123", None, app="app.py"))

    assert path is not None and path.name == f"{os.getpid()}-serve.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (plane,) = live_planes(Settings.load({"FLASHPOINT_STATE_DIR": str(tmp_path / "state")}))
    assert (plane.kind, plane.app, plane.key, plane.pid) == (SERVER, "app.py", None, os.getpid())
    assert describe(plane) == f"flashpoint serve app.py (pid {os.getpid()}, http://127.0.0.1:8123)"


def test_a_dev_servers_announcement_names_it_as_flashpoint_dev(tmp_path: Path) -> None:
    state = tmp_path / "state"
    notice = announce.Announcement(announce.DEV, "http://127.0.0.1:8888", "minted", app="/home/me/project")

    path = announce.write(state, notice)

    assert path is not None and path.name == f"{os.getpid()}-dev.json"
    (plane,) = live_planes(Settings.load({"FLASHPOINT_STATE_DIR": str(tmp_path / "state")}))
    assert (plane.kind, plane.app, plane.key) == (DEV, "/home/me/project", "minted")
    assert describe(plane) == f"flashpoint dev /home/me/project (pid {os.getpid()}, http://127.0.0.1:8888)"


def test_a_dead_servers_announcement_is_dropped(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folder = tmp_path / "state" / "run"
    folder.mkdir(parents=True)
    dead = folder / f"{finished.stdout.strip()}-serve.json"
    body = {"pid": int(finished.stdout), "url": "http://127.0.0.1:9", "key": "k", "kind": "server"}
    dead.write_text(json.dumps(body))

    assert live_planes(Settings.load({"FLASHPOINT_STATE_DIR": str(tmp_path / "state")})) == []
    assert not dead.exists()


def test_an_untrusted_announcement_is_skipped_with_a_warning_that_steers_no_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "state" / "run"
    folder.mkdir(parents=True)
    hostile = folder / f"{os.getpid()}-serve.json"
    hostile.write_text(json.dumps({"pid": os.getpid(), "url": "\x1b]0;owned\x07", "kind": "server"}))

    assert live_planes(Settings.load({"FLASHPOINT_STATE_DIR": str(tmp_path / "state")})) == []

    err = capsys.readouterr().err
    assert f"warning: skipped the announcement {hostile}: url must be an http(s) URL" in err and "\x1b" not in err
    assert hostile.exists()  # its process lives: not ours to remove


def test_url_names_one_server_and_borrows_an_announced_key(tmp_path: Path) -> None:
    settings = Settings.load({"FLASHPOINT_STATE_DIR": str(tmp_path / "state")})
    announce.write(settings.state_dir, announce.Announcement(announce.SERVER, "http://127.0.0.1:8123", "minted"))

    (own,) = planes("http://127.0.0.1:8123/", None, settings)
    (given,) = planes("http://127.0.0.1:8123", "first, second", settings)
    (elsewhere,) = planes("http://10.0.0.5:8000", None, settings)

    assert (own.kind, own.url, own.key, own.pid) == (URL, "http://127.0.0.1:8123", "minted", None)
    assert given.key == "first"
    assert elsewhere.key is None
    with pytest.raises(ConfigError, match="must be an http"):
        planes("10.0.0.5:8000", None, settings)


# --------------------------------------------------------------------------------------------------------------------
# flashpoint status


async def test_status_shows_each_endpoint_its_queue_and_the_fleet(waiting: str, tmp_path: Path) -> None:
    text = invoke(tmp_path, "status")
    as_json = invoke(tmp_path, "status", "--json")

    assert text.exit_code == 0, text.output
    assert f"flashpoint process {os.getpid()}" in text.output
    assert "GPUs: 0 of 3 held" in text.output
    (row,) = [line for line in text.output.splitlines() if "needs-b200" in line]
    assert "NVIDIA B200" in row and "can never run" in row and " 1 " in row
    (plane,) = json.loads(as_json.stdout)["planes"]
    assert plane["pid"] == os.getpid() and plane["kind"] == "script"
    assert plane["gpus"] == {"total": 3, "held": 0, "free": 3}
    (endpoint,) = plane["endpoints"]
    assert (endpoint["name"], endpoint["queueDepth"], endpoint["inProgress"]) == ("needs-b200", 1, 0)
    assert endpoint["workers"] == {} and endpoint["gpusHeld"] == []


def test_status_without_any_process_says_how_to_start_one(tmp_path: Path) -> None:
    text = invoke(tmp_path, "status")
    as_json = invoke(tmp_path, "status", "--json")

    assert text.exit_code == 0
    assert "no running flashpoint process found" in text.stderr
    assert "flashpoint serve app.py" in text.stderr and "--url" in text.stderr
    assert json.loads(as_json.stdout) == {"planes": []}


# --------------------------------------------------------------------------------------------------------------------
# flashpoint jobs, job, logs, cancel, retry


async def test_jobs_lists_and_filters(waiting: str, tmp_path: Path) -> None:
    listed = invoke(tmp_path, "jobs")
    queued = invoke(tmp_path, "jobs", "--status", "in_queue", "--endpoint", "needs-b200", "--json")
    done = invoke(tmp_path, "jobs", "--status", "COMPLETED")
    other = invoke(tmp_path, "jobs", "--endpoint", "other")
    bad = invoke(tmp_path, "jobs", "--status", "done")

    assert listed.exit_code == 0, listed.output
    (row,) = [line for line in listed.output.splitlines() if waiting in line]
    assert "needs-b200" in row and "IN_QUEUE" in row
    (job,) = json.loads(queued.stdout)["jobs"]
    assert (job["id"], job["status"], job["plane"]["pid"]) == (waiting, "IN_QUEUE", os.getpid())
    assert "no jobs with status=COMPLETED" in done.output
    assert "no jobs with endpoint=other" in other.output
    assert bad.exit_code == 2 and "in_queue" in bad.output.lower()  # the choices are listed


async def test_job_shows_its_status_and_why_it_waits(waiting: str, tmp_path: Path) -> None:
    text = invoke(tmp_path, "job", waiting)
    as_json = invoke(tmp_path, "job", waiting, "--json")

    assert text.exit_code == 0, text.output
    assert "IN_QUEUE" in text.output and "needs-b200" in text.output
    assert "why: can never run on this fleet" in text.output
    assert "NVIDIA B200: not_in_fleet" in text.output
    assert "timeline   queued " in text.output
    body = json.loads(as_json.stdout)
    assert body["id"] == waiting and body["plane"] == {"pid": os.getpid(), "url": body["plane"]["url"]}


async def test_cancel_ends_a_waiting_job_once_and_logs_follow_stops_at_the_end(waiting: str, tmp_path: Path) -> None:
    cancelled = invoke(tmp_path, "cancel", waiting)
    again = invoke(tmp_path, "cancel", waiting)
    followed = invoke(tmp_path, "logs", "-f", waiting)
    retried = invoke(tmp_path, "retry", waiting)

    assert cancelled.exit_code == 0 and cancelled.output.strip() == f"job {waiting} CANCELLED"
    assert "had already ended CANCELLED; nothing to cancel" in again.output
    assert followed.exit_code == 0 and followed.stdout == ""
    assert f"-- job {waiting} CANCELLED" in followed.stderr
    assert isinstance(retried.exception, InvalidTransitionError)
    assert "only FAILED or TIMED_OUT jobs can be retried" in str(retried.exception)


def test_an_unknown_job_is_named(embedded: EmbeddedServer, tmp_path: Path) -> None:
    for command in ("job", "logs", "cancel", "retry"):
        result = invoke(tmp_path, command, "0123456789abcdef01234567-fp")
        assert isinstance(result.exception, NotFoundError), result.output
        assert "no job '0123456789abcdef01234567-fp'" in str(result.exception)
        assert "flashpoint jobs" in str(result.exception)


@pytest.mark.parametrize(
    "args", [("jobs",), ("job", "x"), ("logs", "x"), ("cancel", "x"), ("retry", "x"), ("call", "echo")]
)
def test_job_commands_without_any_process_say_how_to_start_one(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = invoke(tmp_path, *args)

    assert isinstance(result.exception, NotFoundError)
    message = str(result.exception)
    assert "no running flashpoint process found" in message
    assert "flashpoint serve app.py" in message and "--url" in message


# --------------------------------------------------------------------------------------------------------------------
# flashpoint call


async def test_call_async_prints_the_id_and_a_call_that_cannot_finish_says_why(waiting: str, tmp_path: Path) -> None:
    submitted = invoke(tmp_path, "call", "needs-b200", '{"data": {"y": 2}}', "--async")
    waited = invoke(tmp_path, "call", "needs-b200", '{"data": {}}', "--timeout", "0.3")

    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    assert JOB_ID.match(job_id)
    job = json.loads(invoke(tmp_path, "job", job_id, "--json").stdout)
    assert job["endpoint"] == "needs-b200" and job["status"] == "IN_QUEUE"
    assert waited.exit_code == 1
    assert "is still IN_QUEUE after 0.3 s: can never run on this fleet" in waited.stderr


async def test_call_refuses_input_that_is_not_json_and_names_what_is_served(waiting: str, tmp_path: Path) -> None:
    bad = invoke(tmp_path, "call", "needs-b200", "{data: 1}")
    unknown = invoke(tmp_path, "call", "neds-b200", "{}")

    assert isinstance(bad.exception, BadInputError)
    assert "the input is not JSON" in str(bad.exception) and "single quotes" in str(bad.exception)
    assert isinstance(unknown.exception, NotFoundError)
    assert "no endpoint 'neds-b200'" in str(unknown.exception)
    assert "they serve needs-b200" in str(unknown.exception)


async def test_call_reads_its_input_from_stdin(waiting: str, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["call", "needs-b200", "-", "--async"], input='{"data": {"z": 3}}', env=cli_env(tmp_path)
    )

    assert result.exit_code == 0, result.output
    assert JOB_ID.match(result.stdout.strip())


# --------------------------------------------------------------------------------------------------------------------
# --url and --key


async def test_url_and_key_reach_one_plane_and_a_wrong_key_says_what_to_set(
    waiting: str, embedded: EmbeddedServer, tmp_path: Path
) -> None:
    state = str(tmp_path / "elsewhere")  # nothing announced there: only --url and --key can reach the plane
    right = invoke(tmp_path, "jobs", "--url", embedded.url, "--key", embedded.api_key, FLASHPOINT_STATE_DIR=state)
    from_env = invoke(tmp_path, "job", waiting, FLASHPOINT_URL=embedded.url, FLASHPOINT_API_KEY=embedded.api_key,
                      FLASHPOINT_STATE_DIR=state)  # fmt: skip
    wrong = invoke(tmp_path, "status", "--url", embedded.url, "--key", "wrong", FLASHPOINT_STATE_DIR=state)
    none = invoke(tmp_path, "gpus", "--url", embedded.url, FLASHPOINT_STATE_DIR=state)

    assert right.exit_code == 0, right.output
    assert waiting in right.output
    assert from_env.exit_code == 0, from_env.output
    assert f"flashpoint server at {embedded.url}" in from_env.output
    assert isinstance(wrong.exception, ConfigError)
    assert "refused the API key: set FLASHPOINT_API_KEY (or pass --key)" in str(wrong.exception)
    assert isinstance(none.exception, ConfigError)
    assert "needs an API key" in str(none.exception)


def test_a_url_where_nothing_listens_is_an_error_not_a_skip(tmp_path: Path) -> None:
    for args in (("status",), ("gpus",), ("explain",), ("jobs",)):
        result = invoke(tmp_path, *args, "--url", "http://127.0.0.1:9")
        assert isinstance(result.exception, Unreachable), result.output
        assert "cannot reach a flashpoint server at http://127.0.0.1:9" in str(result.exception)


# --------------------------------------------------------------------------------------------------------------------
# --watch


async def test_watch_redraws_status_gpus_and_explain(waiting: str, tmp_path: Path) -> None:
    for command in ("status", "gpus", "explain"):
        result = invoke(tmp_path, command, "--watch", "--interval", "0.01", "--count", "2")
        assert result.exit_code == 0, result.output
        assert "every 0.01 s, Ctrl-C to stop" in result.output
        assert "needs-b200" in result.output or command == "gpus"
        assert "NVIDIA A100 80GB PCIe" in result.output


def test_watch_refuses_json_and_a_bad_interval(tmp_path: Path) -> None:
    with_json = invoke(tmp_path, "status", "--watch", "--json")
    no_interval = invoke(tmp_path, "gpus", "--watch", "--interval", "0")
    with_app = invoke(tmp_path, "explain", "--watch", "--app", "app.py")

    assert with_json.exit_code == 2 and "leave out --json" in flat(with_json.output)
    assert no_interval.exit_code == 2 and "positive number of seconds" in flat(no_interval.output)
    assert with_app.exit_code == 2 and "--watch follows running processes" in flat(with_app.output)


def test_watch_without_a_process_keeps_saying_so(tmp_path: Path) -> None:
    result = invoke(tmp_path, "status", "--watch", "--interval", "0.01", "--count", "1")

    assert result.exit_code == 0, result.output
    assert "no running flashpoint process found" in result.output


# --------------------------------------------------------------------------------------------------------------------
# shell completion


def test_the_bash_completion_script() -> None:
    # what --show-completion prints and --install-completion installs in bash; those two find the shell from the
    # process tree (an sh or a shell-less runner above pytest gets "not supported"), so ask for bash's by name
    result = runner.invoke(app, [], prog_name="flashpoint", env={"_FLASHPOINT_COMPLETE": "source_bash"})

    assert result.exit_code == 0, result.output
    assert "_flashpoint_completion()" in result.output
    assert "complete -o default -F _flashpoint_completion flashpoint" in result.output


async def test_job_ids_and_endpoint_names_complete_from_the_running_planes(waiting: str, tmp_path: Path) -> None:
    def complete(words: str) -> list[str]:
        # what the completion script sends: the words typed so far and the index of the one being completed
        env = {**cli_env(tmp_path), "_FLASHPOINT_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split(" ")) - 1)}  # fmt: skip
        result = runner.invoke(app, [], prog_name="flashpoint", env=env)
        assert result.exit_code == 0, result.output
        return result.output.split()

    assert complete("flashpoint ca") == ["cancel", "call"]
    assert complete(f"flashpoint job {waiting[:6]}") == [waiting]
    assert complete("flashpoint call need") == ["needs-b200"]
    assert complete("flashpoint jobs --endpoint n") == ["needs-b200"]
    assert complete("flashpoint logs nothing-like-it") == []
