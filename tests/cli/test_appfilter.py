"""``--app/-a`` and ``--env/-e`` of ``status``, ``jobs``, ``logs`` and ``explain`` (decision 0102): what they send,
how the app and environment are shown, and ``explain`` of a bare name several apps share (the server's 409), against
a loopback server answering ``/v1`` as flashpoint's does (tests/api/test_app_filters.py checks the real routes)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from flashpoint.cli import main
from flashpoint.cli.appfilter import AppFilter, app_env_text
from flashpoint.cli.explain import names_an_app
from flashpoint.explain import Explanation

IDS = ("shop.production.embed", "shop.staging.embed", "blog.production.embed", "local")
AMBIGUOUS = "endpoint name 'embed' is ambiguous: blog.production.embed, shop.production.embed, shop.staging.embed"


def _app_env(key: str) -> tuple[str | None, str | None]:
    parts = key.split(".")
    return (parts[0], parts[1]) if len(parts) == 3 else (None, None)


def _endpoint(key: str) -> dict[str, Any]:
    app, env = _app_env(key)
    return {
        "name": key, "app": app, "env": env, "gpu": "NVIDIA B200", "cpu": None, "kind": "function", "workers": [],
        "workersMin": 0, "workersMax": 1, "queueDepth": 1, "inFlight": 0, "counters": {},
        "explanation": Explanation(key, f"{key} waits for a B200").to_json(),
    }  # fmt: skip


def _job(job_id: str, key: str, created: float) -> dict[str, Any]:
    app, env = _app_env(key)
    return {
        "id": job_id, "endpoint": key, "app": app, "env": env, "status": "IN_QUEUE", "reason": None,
        "createdAt": created, "submittedBy": None, "placement": None, "delayTime": None, "executionTime": None,
    }  # fmt: skip


class Plane(BaseHTTPRequestHandler):
    """``/v1`` as flashpoint answers it, over ``endpoints`` (ids) and their jobs; ``asked`` records each GET."""

    endpoints: tuple[str, ...] = IDS
    asked: list[tuple[str, dict[str, str]]] = []

    def _matching(self, key: str, query: dict[str, str]) -> bool:
        app, env = _app_env(key)
        return query.get("app", app) == app and query.get("env", env) == env

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), dict(parse_qsl(url.query))
        self.asked.append((path, query))
        jobs = [_job(f"job-{n}", key, float(n)) for n, key in enumerate(self.endpoints)]
        status, answer = 200, {}
        if path == "/v1/endpoints":
            answer = {"endpoints": [_endpoint(k) for k in self.endpoints if self._matching(k, query)]}
        elif path == "/v1/fleet":
            answer = {"devices": [], "nodes": [], "summary": "no GPUs"}
        elif path == "/v1/jobs":
            answer = {"jobs": [j for j in reversed(jobs) if self._matching(j["endpoint"], query)]}
        elif path.startswith("/v1/jobs/"):
            found = [j for j in jobs if j["id"] == path.split("/")[3]]
            status, answer = (
                (200, {**found[0], "logs": ["a line"], "explanation": _endpoint(found[0]["endpoint"])["explanation"]})
                if found
                else (404, {"code": "not_found", "message": "no job"})
            )
        elif path == "/v1/endpoints/embed/explain":
            status, answer = 409, {"code": "conflict", "message": AMBIGUOUS}
        elif path.startswith("/v1/endpoints/") and path.split("/")[3] in self.endpoints:
            answer = _endpoint(path.split("/")[3])["explanation"]
        else:
            status, answer = 404, {"code": "not_found", "message": f"no {path}"}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start a loopback plane serving the given endpoint ids; returns its URL."""
    monkeypatch.setenv("FLASHPOINT_STATE_DIR", str(tmp_path / "state"))  # main() reads the real environment
    monkeypatch.delenv("FLASHPOINT_API_KEY", raising=False)
    monkeypatch.setenv("COLUMNS", "220")
    monkeypatch.chdir(tmp_path)  # explain -a NAME looks for NAME.py here
    servers: list[ThreadingHTTPServer] = []
    Plane.asked = []

    def start(endpoints: tuple[str, ...] = IDS) -> str:
        handler = type("Served", (Plane,), {"endpoints": endpoints})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as done:
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def row(out: str, text: str) -> str:
    return next(line for line in out.splitlines() if text in line)


def first_cell(line: str) -> str:
    """The first cell of a table's row (rich draws ``│ a │ b │``)."""
    return line.split("│")[1].strip()


def test_status_filters_by_app_and_shows_app_env(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = serve()

    code, out, _ = run(capsys, "status", "--url", url, "--key", "k", "-a", "shop")
    _, every, _ = run(capsys, "status", "--url", url, "--key", "k")
    _, listed, _ = run(capsys, "status", "--url", url, "--key", "k", "--env", "production", "--json")

    assert code == 0
    assert ("/v1/endpoints", {"app": "shop"}) in Plane.asked
    assert "app/env" in row(out, "asks for")
    assert "shop/production" in row(out, "shop.production.embed") and "shop/staging" in row(out, "shop.staging.embed")
    assert "blog" not in out and "local" not in out and "2 endpoints" in out
    # unfiltered and mixed: the endpoint outside any app has an empty app column, and the rows are grouped
    lines = [line for line in every.splitlines() if "embed" in line or "local" in line]
    assert [first_cell(line) for line in lines] == ["", "blog/production", "shop/production", "shop/staging"]
    rows = json.loads(listed)["planes"][0]["endpoints"]
    assert [(r["name"], r["app"], r["env"]) for r in rows] == [
        ("shop.production.embed", "shop", "production"),
        ("blog.production.embed", "blog", "production"),
    ]


def test_status_of_endpoints_outside_any_app_is_unchanged(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = serve(("local", "other"))

    _, out, _ = run(capsys, "status", "--url", url, "--key", "k")
    _, none, _ = run(capsys, "status", "--url", url, "--key", "k", "-a", "shop", "-e", "production")

    assert "app/env" not in out and first_cell(row(out, "local")) == "local"
    assert "no endpoints of app shop, environment production" in none


def test_jobs_filter_by_app_and_env_and_show_them(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = serve()

    code, out, _ = run(capsys, "jobs", "--url", url, "--key", "k", "-a", "shop", "-e", "staging")
    _, every, _ = run(capsys, "jobs", "--url", url, "--key", "k", "--endpoint", "local")
    _, none, _ = run(capsys, "jobs", "--url", url, "--key", "k", "--app", "nobody")

    assert code == 0
    assert ("/v1/jobs", {"limit": "50", "app": "shop", "env": "staging"}) in Plane.asked
    assert "app/env" in row(out, "status") and "shop/staging" in row(out, "job-1")
    assert "job-0" not in out and "job-3" not in out
    assert "no jobs with app=nobody" in none
    assert "app/env" in row(every, "status")  # (the fake plane ignores --endpoint: every job is listed)


def test_job_shows_its_app_and_env(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = serve()

    _, of_app, _ = run(capsys, "job", "job-2", "--url", url, "--key", "k")
    _, local, _ = run(capsys, "job", "job-3", "--url", url, "--key", "k")

    assert "blog/production" in row(of_app, "app/env")
    assert "app/env" not in local


def test_logs_of_a_job_outside_the_filter_are_refused(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = serve()

    code, out, _ = run(capsys, "logs", "job-0", "--url", url, "--key", "k", "-a", "shop", "-e", "production")
    refused, _, err = run(capsys, "logs", "job-0", "--url", url, "--key", "k", "-a", "blog")

    assert code == 0 and out == "a line\n"
    assert refused == 1 and "'shop.production.embed', not of app blog" in err


def test_explain_a_bare_name_several_apps_share_says_the_servers_409(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = serve()

    code, _, err = run(capsys, "explain", "embed", "--url", url, "--key", "k")
    by_id, out, _ = run(capsys, "explain", "shop.staging.embed", "--url", url, "--key", "k")
    named, pinned, _ = run(capsys, "explain", "embed", "-a", "blog", "-e", "production", "--url", url, "--key", "k")
    within, only, _ = run(capsys, "explain", "embed", "-a", "blog", "--url", url, "--key", "k")
    several, _, too_many = run(capsys, "explain", "embed", "-e", "production", "--url", url, "--key", "k")

    assert code == 1 and AMBIGUOUS in err
    assert by_id == 0 and "endpoint shop.staging.embed:" in out and "app shop, environment staging" in out
    assert named == 0 and "endpoint blog.production.embed:" in pinned
    assert within == 0 and "endpoint blog.production.embed:" in only  # the one `embed` of blog's
    assert several == 1 and "blog.production.embed, shop.production.embed; name one" in too_many


def test_explain_filters_every_endpoint_by_app(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = serve()

    code, out, _ = run(capsys, "explain", "-a", "shop", "--url", url, "--key", "k")
    _, listed, _ = run(capsys, "explain", "--env", "production", "--json", "--url", url, "--key", "k")

    assert code == 0 and ("/v1/endpoints", {"app": "shop"}) in Plane.asked
    assert "shop.production.embed" in out and "shop.staging.embed" in out and "blog" not in out
    items = json.loads(listed)["explanations"]
    assert [(i["endpoint"], i["app"], i["env"]) for i in items] == [
        ("shop.production.embed", "shop", "production"),
        ("blog.production.embed", "blog", "production"),
    ]


def test_explain_app_is_a_file_when_it_names_one_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop.py").write_text("")
    (tmp_path / "pkg").mkdir()

    assert names_an_app("blog")
    assert not names_an_app("shop") and not names_an_app("pkg")  # shop.py and pkg/ here: loaded, as before
    assert not names_an_app("app.py") and not names_an_app("pkg.module") and not names_an_app("app.py:fn")


def test_explain_env_with_a_file_is_a_usage_error(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "explain", "--app", "app.py", "--env", "production")

    assert code == 2 and "--env filters the running processes" in err


@pytest.mark.parametrize("args", [("status", "-a", "shop.production"), ("jobs", "-e", "a/b"), ("logs", "x", "-a", "")])
def test_a_filter_that_is_no_name_is_a_usage_error(
    serve: Any, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, *args, "--url", serve(), "--key", "k")

    assert code == 2 and "no app or environment name" in err


def test_the_filter_and_the_column_text() -> None:
    shown = AppFilter("shop", None)

    assert shown.matches("shop.production.embed") and not shown.matches("blog.production.embed")
    assert not shown.matches("local") and AppFilter().matches("local")
    assert str(AppFilter(None, "staging")) == "environment staging" and AppFilter().params() == {}
    assert (app_env_text("shop.production.embed"), app_env_text("local")) == ("shop/production", "")
