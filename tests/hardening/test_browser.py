"""A web page in the user's browser against keyless flashpoint servers on this machine (issue 20, point 1), with a real
headless Chromium (Debian's ``chromium``, installed by .ci/run; skipped without one, except in CI).

The attacker's page is served from another origin of this machine (``http://localhost:PORT``, while the servers listen
on ``127.0.0.1``). Its script posts job requests to a keyless ``flashpoint serve`` and a ``flashpoint dev`` the way any
page can without asking (``fetch`` in ``no-cors`` mode, ``text/plain`` and form-encoded bodies, a ``text/plain`` form
whose field spells JSON), and a name of the attacker's resolving to 127.0.0.1 (DNS rebinding, simulated with
Chromium's ``--host-resolver-rules``) reads the servers as if they were its own origin. No job may be created, nothing
may be read, and the servers log the refusals; the dashboard each serves keeps working from its own origin.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, start_serve_process, stop_process, until
from tests.e2e.test_dashboard import chromium
from tests.hardening.test_keyless import start_dev

pytestmark = [pytest.mark.slow, pytest.mark.hardening, pytest.mark.timeout(240)]

#: the page's script: every request a page may send without asking, to each target; ``window.__done`` when all left
ATTACK = """
<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="form" method="POST" enctype="text/plain" target="sink"><input id="field"></form>
<script>
const targets = %(targets)s;
async function attack() {
  const sent = [];
  for (const [url, body] of targets) {
    for (const headers of [{}, {"Content-Type": "application/x-www-form-urlencoded"}]) {
      try {
        await fetch(url, {method: "POST", mode: "no-cors", headers, body});
        sent.push(url);
      } catch (error) {
        sent.push(url + ": " + error);
      }
    }
  }
  window.__done = sent;
}
attack();
</script>
</body></html>
"""


class AttackerSite:
    """An HTTP server of the attacker's on this machine: ``GET /`` is ``ATTACK`` with its targets."""

    def __init__(self, targets: list[tuple[str, str]]) -> None:
        page = (ATTACK % {"targets": json.dumps(targets)}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def keyless_serve(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A keyless ``flashpoint serve`` of tests/apps/keyless_app.py on 127.0.0.1: its URL and its log file."""
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1", "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}
    env.pop("FLASHPOINT_API_KEY", None)
    command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/keyless_app.py"), "--port", "0",
               "--db", str(tmp_path / "jobs.db")]  # fmt: skip
    log = tmp_path / "serve.err"
    with log.open("w") as err:
        proc, url = start_serve_process(command, env, stderr=err)
    try:
        yield url, log
    finally:
        stop_process(proc)


def jobs(url: str) -> list[dict[str, object]]:
    """The server's jobs, read as a program reads them (its own Host, no Origin)."""
    listed: list[dict[str, object]] = httpx.get(f"{url}/v1/jobs", timeout=30).raise_for_status().json()["jobs"]
    return listed


async def test_a_page_of_another_origin_runs_nothing_and_reads_nothing(
    keyless_serve: tuple[str, Path], tmp_path: Path
) -> None:
    serve_url, serve_log = keyless_serve
    (tmp_path / "dev").mkdir()
    dev = start_dev(tmp_path / "dev")
    body = json.dumps({"input": {"from": "page", "x": 1}})
    targets = [(f"{serve_url}/v2/echo/run", body), (f"{serve_url}/v2/echo/runsync", body),
               (f"{dev.url}/worker/runsync", body), (f"{dev.url}/v2/worker/run", body)]  # fmt: skip
    site = AttackerSite(targets)
    try:
        async with chromium(tmp_path, "--host-resolver-rules=MAP attacker.example 127.0.0.1") as page:
            # the attacker's page, at http://localhost:PORT: another origin, and another site, than 127.0.0.1
            await page.loaded("Page.navigate", {"url": f"http://localhost:{site.port}/"})
            sent = await page.wait_for("window.__done", "the page's requests to leave", timeout=60)
            assert sent == [url for url, _ in targets for _ in range(2)], sent  # each one left the browser
            # a text/plain form whose one field spells a job request: {"input": {...}, "pad": "="}
            for action in (f"{serve_url}/v2/echo/runsync", f"{dev.url}/worker/runsync"):
                await page.evaluate(
                    "(() => { const f = document.getElementById('form'); f.action = " + json.dumps(action) + ";"
                    " const i = document.getElementById('field');"
                    ' i.name = \'{"input": {"from": "form", "x": 1}, "pad": "\'; i.value = \'"}\';'
                    " window.__sunk = false;"
                    " document.querySelector('iframe').onload = () => { window.__sunk = true; };"
                    " f.submit(); })()"
                )
                await page.wait_for("window.__sunk", f"the form's answer from {action}", timeout=60)

            # DNS rebinding: the attacker's name now resolves to this machine, so its page is "same-origin" with it
            for url in (serve_url, dev.url):
                await page.loaded("Page.navigate", {"url": url.replace("127.0.0.1", "attacker.example") + "/v1/jobs"})
                shown = await page.text("body")
                assert "misdirected_request" in shown and '"jobs"' not in shown, shown

            # the dashboard each server serves still reads it, from its own origin
            for url in (serve_url, dev.url):
                await page.loaded("Page.navigate", {"url": url + "/"})
                status = await page.evaluate("fetch('/v1/jobs').then(r => r.status)")
                assert status == 200, url

        # no job exists on either server, and both logged what they refused
        assert jobs(serve_url) == [] and jobs(dev.url) == []
        for log in (serve_log, dev.log):
            until(lambda: "refused POST" in log.read_text(errors="replace"), 30, f"a refusal in {log.name}")  # noqa: B023
    finally:
        site.close()
        dev.stop()
