"""The web dashboard as a person sees it: a real `flashpoint serve` on a simulated fleet, and a real headless Chromium
(Debian's `chromium`, installed by .ci/run) driven over the Chrome DevTools Protocol with a websocket (the `websockets`
package uvicorn[standard] brings). Checks read the page's text after its script ran: the fleet, a queued job's reason,
a finished job's output, the status filter, live updates without a reload, hostile output shown as text, the key.

Skipped when no Chromium binary exists, except in CI (CI=true), where that is a failure: .ci/run installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.conftest import Served

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

APP = textwrap.dedent(
    """
    from __future__ import annotations

    from typing import Any

    from flashpoint import Endpoint, GpuGroup, GpuType


    @Endpoint(name="echo", gpu=GpuGroup.ANY)
    async def echo(**payload: Any) -> dict[str, Any]:
        print("echo got", payload)
        return {"payload": payload}


    @Endpoint(name="nowhere", gpu=GpuType.NVIDIA_B200)
    async def nowhere(x: int = 0) -> int:
        return x


    @Endpoint(name="boom", cpu="cpu3c-1-2")
    async def boom(message: str) -> None:
        raise ValueError(message)
    """
)

#: what a handler may hand back: markup that would run if the page inserted it as HTML
HOSTILE = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        raise AssertionError(
            "no chromium binary on PATH; .ci/run installs Debian's chromium (apt-get install chromium)"
        )
    pytest.skip("no chromium binary on PATH (apt-get install chromium); CI installs it")


class Page:
    """One tab of a headless Chromium, driven over the DevTools protocol: evaluate, wait for, and the events seen."""

    def __init__(self, ws: ClientConnection, session: str) -> None:
        self.ws = ws
        self.session = session
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            if "id" in message and message["id"] in self.pending:
                self.pending.pop(message["id"]).set_result(message)
            elif "method" in message:
                self.events.append((message["method"], message.get("params", {})))

    async def call(self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False) -> Any:
        ident = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if not browser:
            message["sessionId"] = self.session
        await self.ws.send(json.dumps(message))
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer:
            raise AssertionError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def text(self, selector: str) -> str:
        """What a person reads in the element: its rendered text (hidden parts left out)."""
        return str(await self.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''"))

    async def wait_for(self, expression: str, what: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                seen = await self.text("body")
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; the page shows:\n{seen[:3000]}")
            await asyncio.sleep(0.1)  # polling the page under test, bounded by the deadline

    async def wait_for_text(self, selector: str, *needles: str, timeout: float = 20.0) -> str:
        checks = " && ".join(f"t.includes({json.dumps(n)})" for n in needles)
        query = f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''"
        await self.wait_for(f"(() => {{ const t = {query}; return {checks}; }})()", f"{needles} in {selector}", timeout)
        return await self.text(selector)

    async def loaded(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Run a navigation command (Page.navigate, Page.reload) and wait for the page's load event."""
        seen = len(self.events)
        await self.call(method, params)
        deadline = time.monotonic() + 30
        while not any(name == "Page.loadEventFired" for name, _ in self.events[seen:]):
            assert time.monotonic() < deadline, f"{method}: no load event within 30 s"
            await asyncio.sleep(0.02)  # the reader task appends events as they arrive

    async def type_into(self, selector: str, text: str) -> None:
        """Focus a field and type into it as a keyboard would (Input.insertText)."""
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        await self.call("Input.insertText", {"text": text})

    async def click(self, selector: str) -> None:
        assert await self.evaluate(f"!!document.querySelector({json.dumps(selector)})"), f"nothing matches {selector}"
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    async def choose(self, selector: str, value: str) -> None:
        """Pick an option of a <select> as a person does: the value changes, then the change event fires."""
        await self.evaluate(
            f"(() => {{ const s = document.querySelector({json.dumps(selector)}); s.value = {json.dumps(value)};"
            " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
        )


@contextlib.asynccontextmanager
async def chromium(tmp_path: Path, *args: str) -> AsyncIterator[Page]:
    """A fresh headless Chromium with its own profile, one blank tab attached; killed at the end. ``args``: more
    command-line switches (e.g. ``--host-resolver-rules=...``)."""
    binary = chromium_binary()
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    command = [
        binary,
        "--headless=new",
        "--remote-debugging-port=0",
        "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={profile}",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-proxy-server",
        *args,
        "about:blank",
    ]
    log = (tmp_path / "chromium.log").open("w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    reader: asyncio.Task[None] | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"chromium did not start: {(tmp_path / 'chromium.log').read_text()[-2000:]}")
            await asyncio.sleep(0.05)  # Chromium writes its port when its DevTools server listens
        port, path = port_file.read_text().splitlines()[:2]
        async with connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
            page = Page(ws, "")
            reader = asyncio.create_task(page.read())
            target = await page.call("Target.createTarget", {"url": "about:blank"}, browser=True)
            attached = await page.call(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, browser=True
            )
            page.session = attached["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                await page.call(f"{domain}.enable")
            yield page
    finally:
        if reader is not None:
            reader.cancel()
        proc.kill()
        proc.wait(10)
        log.close()


def submit(served: Served, endpoint: str, payload: dict[str, Any], *, sync: bool = False) -> dict[str, Any]:
    route = "runsync" if sync else "run"
    response = httpx.post(
        f"{served.url}/v2/{endpoint}/{route}", json={"input": payload}, headers=served.headers, timeout=60
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


async def test_the_dashboard_shows_the_fleet_jobs_and_reasons_live(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    app = tmp_path / "dash_app.py"
    app.write_text(APP)
    served = serve(app=str(app))
    finished = submit(served, "echo", {"text": HOSTILE}, sync=True)
    assert finished["status"] == "COMPLETED", finished
    queued = submit(served, "nowhere", {"x": 1})
    failed = submit(served, "boom", {"message": "<b>bad</b> input"}, sync=True)
    assert failed["status"] == "FAILED", failed

    # the key: the page itself loads without one, every data call needs it
    with httpx.Client(base_url=served.url, timeout=30) as client:
        page_answer = client.get("/")
        assert page_answer.status_code == 200
        assert "default-src 'self'" in page_answer.headers["content-security-policy"]
        assert client.get("/v1/fleet").status_code == 401
        assert client.get("/v1/fleet", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/v1/fleet", headers=served.headers).status_code == 200

    async with chromium(tmp_path) as page:
        await page.loaded("Page.navigate", {"url": served.url + "/"})
        await page.wait_for("!document.getElementById('key-form').hidden", "the key form")
        assert "needs its API key" in await page.text("#key-form")
        assert await page.evaluate("document.getElementById('main').hidden")

        await page.type_into("#key-input", "wrong-key")
        await page.click("#key-submit")
        await page.wait_for_text("#key-message", "refused that key")
        assert await page.evaluate("document.getElementById('main').hidden")

        await page.type_into("#key-input", served.key)
        await page.click("#key-submit")
        fleet = await page.wait_for_text("#fleet", "NVIDIA H200", "NVIDIA A100 80GB PCIe", "simulated")
        assert "free" in fleet
        assert await page.evaluate("sessionStorage.getItem('flashpoint.apiKey')") == served.key

        # the endpoint whose GPU is not in the fleet: its reason per candidate
        endpoints = await page.wait_for_text("#endpoints", "nowhere", "not_in_fleet", "no node has NVIDIA B200")
        assert "can never run here" in endpoints

        # the queued job: click it, read why it waits
        await page.wait_for_text("#jobs-body", queued["id"], finished["id"], failed["id"])
        await page.click(f'tr.job[data-job="{queued["id"]}"]')
        detail = await page.wait_for_text("#job-detail", queued["id"], "IN_QUEUE", "Why it waits", "not_in_fleet")
        assert "no node has NVIDIA B200" in detail and "not placed yet" in detail

        # the finished job: its placement, timeline, output and logs; hostile markup stays text and never runs
        await page.click(f'tr.job[data-job="{finished["id"]}"]')
        detail = await page.wait_for_text("#job-detail", finished["id"], "COMPLETED", "Output", "simulated")
        assert "submitted" in detail and "started" in detail and "ended" in detail
        assert HOSTILE in await page.text("#job-detail pre.output")
        assert "echo got" in await page.text("#job-detail pre.logs")
        assert await page.evaluate("document.querySelectorAll('main img, main script').length") == 0
        assert await page.evaluate("typeof window.__pwned") == "undefined"

        # the failed job's error, as text
        await page.click(f'tr.job[data-job="{failed["id"]}"]')
        detail = await page.wait_for_text("#job-detail", "ValueError", "<b>bad</b> input")
        assert await page.evaluate(
            "[...document.querySelectorAll('#job-detail b')].every(b => !b.textContent.includes('bad'))"
        )

        # the status filter
        await page.choose("#filter-status", "COMPLETED")
        await page.wait_for(
            f"!document.querySelector('tr.job[data-job=\"{queued['id']}\"]')", "the queued job filtered out"
        )
        jobs = await page.text("#jobs-body")
        assert finished["id"] in jobs and failed["id"] not in jobs
        statuses = await page.evaluate("[...document.querySelectorAll('tr.job')].map(r => r.dataset.status)")
        assert statuses and set(statuses) == {"COMPLETED"}
        assert "status=COMPLETED" in await page.evaluate("location.hash")
        await page.choose("#filter-status", "IN_QUEUE")
        await page.wait_for_text("#jobs-body", queued["id"])
        assert finished["id"] not in await page.text("#jobs-body")
        await page.choose("#filter-status", "")

        # live: a job submitted now appears, runs and finishes on the page without a reload
        await page.evaluate("window.__stillHere = 'yes'")
        later = submit(served, "echo", {"text": "later"})
        await page.wait_for_text("#jobs-body", later["id"])
        await page.click(f'tr.job[data-job="{later["id"]}"]')
        await page.wait_for_text("#job-detail", later["id"], "COMPLETED", "later")
        assert await page.evaluate("window.__stillHere") == "yes"

        # a reload keeps the key (this tab's sessionStorage) and the selected job (the address's fragment)
        await page.loaded("Page.reload")
        await page.wait_for_text("#job-detail", later["id"], "COMPLETED")
        assert await page.evaluate("document.getElementById('key-form').hidden")

        # nothing came from elsewhere, and the page broke no rule of its Content-Security-Policy
        urls = [params["request"]["url"] for method, params in page.events if method == "Network.requestWillBeSent"]
        assert urls and all(url.startswith(served.url) for url in urls), urls
        logged = [params["entry"].get("text", "") for method, params in page.events if method == "Log.entryAdded"]
        assert not [text for text in logged if "Content Security Policy" in text], logged
        thrown = [params for method, params in page.events if method == "Runtime.exceptionThrown"]
        assert not thrown, thrown
