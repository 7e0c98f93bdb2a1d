"""The CLI's human views are inert (issue 20 point 6): what other processes' lease records, the planes' fleets and
explanations, and a server's error messages say is escaped before it is drawn, while rich's own styles still work and
no text is read as markup. End to end with real jobs: ``tests/hardening/test_terminal_text.py``."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from typer.testing import CliRunner

from flashpoint.cli import app, main
from flashpoint.cli.explain import Item, render_items
from flashpoint.cli.gpus import render as render_gpus
from flashpoint.cli.jobs import job_view
from flashpoint.cli.live import SERVER, LivePlane
from flashpoint.cli.output import InertConsole, console
from flashpoint.cli.status import render as render_status
from flashpoint.config import Settings
from flashpoint.environments import BuildFailure, BuildProgress, EnvironmentCache
from flashpoint.environments.lock import KeyLock
from flashpoint.environments.records import write_json
from flashpoint.explain import Code, Explanation, OtherProcess, WaitReason
from flashpoint.sdk.progress import waiting_text
from tests.test_terminal import raw_characters

#: OSC 52 (writes the clipboard), a screen clear, a C1 CSI, a carriage return, a bidi override
HOSTILE = "A\x1b]52;c;aGFja2Vk\x07B\x1b[2JC\x9b31mD\rE\u202eF"
SHOWN = "A\\x1b]52;c;aGFja2Vk\\x07B\\x1b[2JC\\x9b31mD\\x0dE\\u202eF"

#: another user's process as its lease record describes it: every text in it chosen by that user
HOLDER = OtherProcess(
    pid=4242,
    kind="script",
    command=f"python {HOSTILE}.py",
    url=f"http://127.0.0.1:9/{HOSTILE}",
    endpoint=f"ep-{HOSTILE}",
    worker=f"w-{HOSTILE}",
    user=f"mallory{HOSTILE}",
)
PLANE = LivePlane(pid=4243, url="http://127.0.0.1:9", key=None, kind=SERVER, app="app.py")


def busy_explanation() -> Explanation:
    reason = WaitReason(
        "NVIDIA H200", Code.BUSY, f"all 1 held: by {HOLDER.label}", holders=(HOLDER.endpoint,), processes=(HOLDER,)
    )
    return Explanation(
        "echo",
        f"waiting: every candidate is busy ({HOLDER.label})",
        reasons=(reason,),
        job_id="j1-fp",
        status="IN_QUEUE",
    )


def printed(capsys: pytest.CaptureFixture[str], *parts: Any) -> str:
    out = console()
    for part in parts:
        out.print(part)
    return capsys.readouterr().out


def assert_inert(text: str, shows: int = 1) -> None:
    """No raw control character; the hostile text's start escaped at least ``shows`` times (a table cell may cut
    the rest)."""
    assert raw_characters(text) == [], text
    assert text.count(SHOWN[:20]) >= shows, text


def test_explain_shows_another_users_lease_record_inert(capsys: pytest.CaptureFixture[str]) -> None:
    items = [Item(busy_explanation(), "flashpoint serve app.py (pid 4243)", 4243, asks="NVIDIA H200")]

    print(render_items(items).plain, end="")  # what `flashpoint explain` prints

    text = capsys.readouterr().out
    assert_inert(text, shows=5)
    assert f"pid 4242 of user mallory{SHOWN} (python {SHOWN}.py, at http://127.0.0.1:9/{SHOWN}), endpoint ep-" in text
    # the data itself is unchanged: --json prints it exactly
    assert items[0].to_json()["reasons"][0]["processes"][0]["user"] == f"mallory{HOSTILE}"


def test_a_waiting_jobs_view_and_the_sdks_waiting_line_name_the_holder_inert(
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = {"id": "j1-fp", "status": "IN_QUEUE", "endpoint": "echo", "explanation": busy_explanation().to_json()}

    assert_inert(printed(capsys, job_view(PLANE, body)), shows=5)
    line = waiting_text(busy_explanation().summary)
    assert raw_characters(line) == [] and "\n" not in line and SHOWN in line


def fleet_with_hostile_names() -> dict[str, Any]:
    device = {"node": f"node{HOSTILE}", "index": 0, "model": "NVIDIA H200", "name": "NVIDIA H200", "recognised": True,
              "pool": None, "vramGb": 141, "simulated": True, "worker": f"w-{HOSTILE}",
              "endpoint": f"ep-{HOSTILE}"}  # fmt: skip
    node = {"name": f"node{HOSTILE}", "cpus": 4, "freeCpus": 2, "memoryGb": 16, "freeMemoryGb": 8, "cuda": "12.4",
            "labels": {f"team{HOSTILE}": HOSTILE}, "simulated": True,
            "reservations": [{"endpoint": f"cpu-{HOSTILE}", "worker": "w2", "cores": [0, 1]}]}  # fmt: skip
    return {"pid": 4243, "url": PLANE.url, "kind": SERVER, "source": f"flashpoint serve {HOSTILE}",
            "devices": [device], "models": [{"model": "NVIDIA H200", "recognised": True, "count": 1, "free": 0}],
            "nodes": [node]}  # fmt: skip


def test_gpus_draws_a_planes_holders_nodes_and_labels_inert(capsys: pytest.CaptureFixture[str]) -> None:
    fleet = fleet_with_hostile_names()

    text = printed(capsys, *render_gpus("live", [fleet], Settings.load({})))

    assert_inert(text, shows=6)
    assert fleet["devices"][0]["endpoint"] == f"ep-{HOSTILE}"  # the body given stays as it was (--json prints it)


def test_status_draws_the_planes_texts_inert(capsys: pytest.CaptureFixture[str]) -> None:
    row = {"name": "echo", "kind": "function", "gpu": f"gpu {HOSTILE}", "cpu": None, "workers": {"IDLE": 1},
           "workersMin": 0, "workersMax": 1, "queueDepth": 1, "inProgress": 0,
           "gpusHeld": [{"node": f"n{HOSTILE}", "index": 0, "model": "NVIDIA H200", "simulated": True, "worker": "w"}],
           "cpusHeld": [], "summary": busy_explanation().summary, "counters": {}}  # fmt: skip
    body = {"source": "flashpoint serve app.py", "kind": SERVER, "pid": 4243, "url": PLANE.url, "app": "app.py",
            "command": f"python {HOSTILE}", "endpoints": [row], "gpus": {"total": 1, "held": 1, "free": 0},
            "models": [{"model": f"m{HOSTILE}", "recognised": True, "count": 1, "free": 0}]}  # fmt: skip

    assert_inert(printed(capsys, render_status([body], [])), shows=4)


def test_the_console_reads_no_markup_and_escapes_strings_while_our_styles_still_work() -> None:
    out = io.StringIO()
    terminal = InertConsole(file=out, force_terminal=True, color_system="standard", width=200, highlight=False)

    terminal.print(f"[link=http://evil.example]click[/link] [bold]{HOSTILE}[/bold]")
    terminal.print(Text("ours", style="green"))

    text = out.getvalue()
    assert f"[link=http://evil.example]click[/link] [bold]{SHOWN}[/bold]" in text  # no OSC 8 link, no markup
    assert "\x1b]8;" not in text
    assert "\x1b[32mours\x1b[0m" in text  # our own style is drawn
    assert [c for c in raw_characters(text) if c != "\x1b"] == []
    assert text.count("\x1b") == 2  # only the style's own two escapes


class _HostileServer(BaseHTTPRequestHandler):
    """A server whose error messages carry terminal controls: what a plane's answer may quote."""

    def do_GET(self) -> None:
        body = json.dumps({"error": "bad_input", "code": "bad_input", "message": f"refused {HOSTILE}"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hostile_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_main_prints_an_error_that_quotes_a_server_inert(
    hostile_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHPOINT_STATE_DIR", str(tmp_path / "state"))  # main() reads the real environment
    monkeypatch.delenv("FLASHPOINT_API_KEY", raising=False)

    with pytest.raises(SystemExit) as exit_info:
        main(["jobs", "--url", hostile_server, "--key", "k"])

    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err == f"Error: refused {SHOWN}\n"


def test_env_list_shows_a_builds_output_inert_and_its_json_exact(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    root.mkdir()
    cache = EnvironmentCache(root, pip_config={})
    now = time.time()  # the CLI reads the real clock
    failed = cache.key(["nope==1"])
    tail = ("x", f"error: {HOSTILE}", f"  cause {HOSTILE}")  # what a package's build printed
    write_json(root / f"{failed}.failed", BuildFailure(failed, ("nope==1",), "c", now - 120, "no", 1, tail).to_json())
    building = cache.key(["torch==2.3.1"])
    progress = BuildProgress(building, 4242, now - 12, "d", ("torch==2.3.1",), f"Downloading {HOSTILE}", 7)
    write_json(root / f"{building}.building", progress.to_json())

    with KeyLock(root / f"{building}.lock"):  # a build in progress holds its key's lock
        table = CliRunner().invoke(app, ["venv", "list", "--dir", str(root)])
        as_json = CliRunner().invoke(app, ["venv", "list", "--dir", str(root), "--json"])

    assert table.exit_code == 0, table.output
    assert_inert(table.stdout, shows=3)
    body = json.loads(as_json.stdout)
    assert body["failed"][0]["output_tail"][-1] == f"  cause {HOSTILE}"
    assert body["building"][0]["last_line"] == f"Downloading {HOSTILE}"


RUN_APP = """
def echo(text: str) -> dict:
    return {"echo": text}


def fail(text: str) -> None:
    raise ValueError("failed with " + text)
"""


@pytest.mark.usefixtures("restore_imports")
def test_run_prints_a_result_as_exact_json_and_a_traceback_inert(tmp_path: Path) -> None:
    path = tmp_path / "run_inert_app.py"
    path.write_text(RUN_APP)

    done = CliRunner().invoke(app, ["run", f"{path}::echo", "--text", HOSTILE])
    failed = CliRunner().invoke(app, ["run", f"{path}::fail", "--text", HOSTILE])

    assert done.exit_code == 0, done.output
    assert raw_characters(done.stdout) == [] and json.loads(done.stdout) == {"echo": HOSTILE}
    assert failed.exit_code == 1
    assert_inert(failed.stderr)
    assert f"ValueError: failed with {SHOWN}" in failed.stderr
