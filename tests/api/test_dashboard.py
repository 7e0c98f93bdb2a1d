"""The dashboard's routes (api/dashboard.py): the page and its assets without a key, their Content-Security-Policy,
nothing loaded from elsewhere, no HTML made from data, the self-contained /docs page, and the embedded server's page
and start line. The page in a real browser is tests/e2e/test_dashboard.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import httpx
import pytest

from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.dashboard import ASSETS, CSP, docs_page
from flashpoint.api.runpod import Intake
from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.hosting.embedded import EmbeddedServer, dashboard_line
from tests.scheduler.door import BASE_URL, open_door

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: the page's scripts: dashboard.js, the module index.html loads, and the modules it imports
MODULES = ("dashboard.js", "api.js", "dom.js", "fleet.js", "jobs.js", "state.js", "usage.js")
SERVED = (*MODULES, "dashboard.css", "favicon.svg")
#: what index.html itself names (the other modules are reached by dashboard.js's imports)
LOADED_BY_THE_PAGE = ("dashboard.js", "dashboard.css", "favicon.svg")


async def server_client(api_keys: tuple[str, ...] = (KEY,)) -> httpx.AsyncClient:
    """A client of the server's whole app (as `flashpoint serve` serves it) over a door plane, in-process."""
    door = await open_door()
    app = Dispatch(create_app(door.plane, api_keys=api_keys, intake=Intake({})), door.plane)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


def package_text(name: str) -> str:
    return resources.files("flashpoint").joinpath("dashboard").joinpath(name).read_text()


def code_of(script: str) -> str:
    """A script without its whole-line comments (the header names the calls it never makes)."""
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("//"))


def imports_of(script: str) -> list[str]:
    """The module specifiers a script imports, static (``import ... from "x"``, ``import "x"``) or dynamic."""
    code = code_of(script)
    return re.findall(r"\bfrom\s+[\"']([^\"']*)[\"']", code) + re.findall(r"\bimport\s*\(?\s*[\"']([^\"']*)[\"']", code)


class Tags(HTMLParser):
    """Every start tag of a page, with its attributes, and the text inside <script> and <style> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline: list[str] = []
        self._inside: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._inside = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag: str) -> None:
        self._inside = None

    def handle_data(self, data: str) -> None:
        if self._inside and data.strip():
            self.inline.append(f"<{self._inside}>{data.strip()[:60]}")


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def assert_self_contained(page: str) -> None:
    """No inline script or style, no event handler attribute, and every URL the page loads is this server's."""
    tags = parse(page)
    assert tags.inline == []
    assert not [tag for tag, _ in tags.tags if tag == "style"]
    for tag, attrs in tags.tags:
        assert not [name for name in attrs if name.startswith("on") or name == "style"], (tag, attrs)
        for name in ("src", "href", "action"):
            url = attrs.get(name)
            if url is not None:
                assert url.startswith("/") and not url.startswith("//"), (tag, name, url)


# ---------------------------------------------------------------------------------------------------------------------
# the page and its assets


async def test_the_page_loads_without_a_key_while_its_data_needs_one() -> None:
    async with await server_client() as client:
        page = await client.get("/")
        fleet = await client.get("/v1/fleet")
        keyed = await client.get("/v1/fleet", headers=AUTH)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="/static/dashboard/dashboard.js"></script>' in page.text
    assert fleet.status_code == 401 and fleet.json()["code"] == "unauthorized"
    assert keyed.status_code == 200 and keyed.json()["devices"]


async def test_every_answer_carries_a_strict_content_security_policy() -> None:
    async with await server_client() as client:
        answers = [await client.get("/"), *[await client.get(f"/static/dashboard/{name}") for name in SERVED]]
    for answer in answers:
        assert answer.status_code == 200, answer.url
        assert answer.headers["content-security-policy"] == CSP
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"
    policy = dict(part.strip().split(" ", 1) for part in CSP.split(";"))
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert "unsafe" not in CSP and "*" not in CSP and "http" not in CSP
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'" and policy["base-uri"] == "'none'"


async def test_assets_are_served_with_their_media_types_and_head_works() -> None:
    async with await server_client() as client:
        for name in SERVED:
            answer = await client.get(f"/static/dashboard/{name}")
            assert answer.headers["content-type"] == ASSETS[name], name
            assert answer.content == resources.files("flashpoint").joinpath("dashboard").joinpath(name).read_bytes()
            head = await client.head(f"/static/dashboard/{name}")
            assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize(
    "path",
    [
        "/static/dashboard/nope.js",
        "/static/dashboard/index.html",  # the page is served at / only
        "/static/dashboard/..%2F..%2Fapi%2Fdashboard.py",
        "/static/dashboard/%2e%2e/dashboard.js",
        "/static/dashboard/sub/dashboard.js",
        "/static/dashboard/",
        "/static/dashboard.js",
    ],
)
async def test_nothing_but_the_listed_assets_is_served(path: str) -> None:
    async with await server_client() as client:
        answer = await client.get(path)
    assert answer.status_code == 404, answer.text
    assert "import" not in answer.text  # no source file leaked


async def test_an_unchanged_asset_is_answered_304_and_a_changed_tag_gets_the_body() -> None:
    async with await server_client() as client:
        first = await client.get("/static/dashboard/dashboard.js")
        tag = first.headers["etag"]
        again = await client.get("/static/dashboard/dashboard.js", headers={"If-None-Match": tag})
        other = await client.get("/static/dashboard/dashboard.js", headers={"If-None-Match": '"stale"'})
        page = await client.get("/", headers={"If-None-Match": f'"x", {(await client.get("/")).headers["etag"]}'})
    assert first.headers["cache-control"] == "no-cache"
    assert again.status_code == 304 and again.content == b"" and again.headers["content-security-policy"] == CSP
    assert other.status_code == 200 and other.content == first.content
    assert page.status_code == 304


async def test_a_server_without_keys_serves_the_page_and_its_data() -> None:
    async with await server_client(()) as client:
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/v1/fleet")).status_code == 200


def test_the_page_has_no_inline_script_or_style_and_loads_only_its_own_assets() -> None:
    page = package_text("index.html")
    assert_self_contained(page)
    loaded = {attrs.get("src") or attrs.get("href") for tag, attrs in parse(page).tags if tag in ("script", "link")}
    assert loaded == {f"/static/dashboard/{name}" for name in LOADED_BY_THE_PAGE}
    scripts = [attrs for tag, attrs in parse(page).tags if tag == "script"]
    assert scripts == [{"type": "module", "src": "/static/dashboard/dashboard.js"}]


def test_every_module_is_served_and_imported_by_relative_path_from_the_page_script() -> None:
    # Given the package's scripts and the served list
    on_disk = {item.name for item in resources.files("flashpoint").joinpath("dashboard").iterdir()}
    assert {name for name in on_disk if name.endswith(".js")} == set(MODULES)
    assert {name for name in ASSETS if name.endswith(".js")} == set(MODULES)
    # When the imports are followed from dashboard.js, every specifier names a sibling module (nothing from elsewhere)
    reached, todo = set(), ["dashboard.js"]
    while todo:
        name = todo.pop()
        reached.add(name)
        for specifier in imports_of(package_text(name)):
            assert re.fullmatch(r"\./[a-z]+\.js", specifier), (name, specifier)
            if specifier[2:] not in reached:
                todo.append(specifier[2:])
    # Then every module is reached, so none is dead and none is missing from ASSETS (a browser would get a 404)
    assert reached == set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_no_script_turns_data_into_html_or_code(name: str) -> None:
    code = code_of(package_text(name))
    banned = r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc|DOMParser"
    banned += r"|createContextualFragment|setAttribute\(\s*['\"]on|\bsetTimeout\(\s*['\"`]|\bsetInterval\("
    assert re.findall(banned, code) == []
    assert "http://" not in code and "https://" not in code and "//cdn" not in code
    assert "localStorage" not in code and "cookie" not in code  # the key lives in this tab only


def test_the_scripts_write_text_and_keep_the_key_in_this_tab() -> None:
    scripts = {name: code_of(package_text(name)) for name in MODULES}
    assert "textContent" in scripts["dom.js"] and "createTextNode" in scripts["dom.js"]
    assert "sessionStorage" in scripts["state.js"] and "sessionStorage" in scripts["dashboard.js"]
    assert '"Bearer "' in scripts["api.js"] and 'credentials: "omit"' in scripts["api.js"]


def test_the_app_filter_is_a_select_built_from_the_data_as_text() -> None:
    """Decision 0102: an app/env select whose options come from the endpoints' ``app`` and ``env`` (as text), sent to
    ``/v1/jobs`` as ``app=``/``env=`` and kept in the fragment; each endpoint and job shows its app and environment."""
    page = package_text("index.html")
    scripts = {name: code_of(package_text(name)) for name in MODULES}
    assert '<select id="filter-app"><option value="">all</option></select>' in page
    assert 'query.set("app", state.app)' in scripts["api.js"] and 'query.set("env", state.env)' in scripts["api.js"]
    assert 'params.set("app", state.app)' in scripts["dashboard.js"] and '$("filter-app")' in scripts["dashboard.js"]
    fleet = scripts["fleet.js"]
    assert "function drawAppChoices(endpoints)" in fleet and 'el("option", { text: label(choice) })' in fleet
    assert "every.filter(inChosenApp)" in fleet and 'fact("app/env", appEnvText(ep))' in fleet
    assert 'el("td", { text: appEnvText(j) })' in scripts["jobs.js"]


def test_the_app_filter_s_choices_read_back_to_the_filter(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    (tmp_path / "state.js").write_text(package_text("state.js"))
    (tmp_path / "check.mjs").write_text(
        textwrap.dedent(
            """
            globalThis.sessionStorage = { getItem: () => null };
            const { appChoice, appFilter, appEnvText, inChosenApp, state } = await import("./state.js");
            const choices = [["shop", ""], ["shop", "production"], ["", "production"], ["", ""]];
            const back = choices.map(([app, env]) => appFilter(appChoice(app, env)));
            state.app = "shop";
            const rows = [{ app: "shop", env: "staging" }, { app: "blog", env: "staging" }, { app: null, env: null }];
            const kept = rows.map(inChosenApp);
            state.app = "";
            state.env = "staging";
            const byEnv = rows.map(inChosenApp);
            console.log(JSON.stringify({ back, kept, byEnv, text: rows.map(appEnvText) }));
            """
        )
    )

    done = subprocess.run([node, "check.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=30)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "back": [{"app": a, "env": e} for a, e in [("shop", ""), ("shop", "production"), ("", "production"), ("", "")]],
        "kept": [True, False, False],
        "byEnv": [True, True, False],
        "text": ["shop/staging", "blog/staging", ""],
    }


def test_the_stylesheet_loads_nothing() -> None:
    css = package_text("dashboard.css")
    assert "url(" not in css and "@import" not in css


# ---------------------------------------------------------------------------------------------------------------------
# /docs: FastAPI's Swagger UI (from a CDN) replaced by a page of the package's own


async def test_docs_is_a_self_contained_page_of_the_schema_behind_the_key() -> None:
    async with await server_client() as client:
        denied = await client.get("/docs")
        docs = await client.get("/docs", headers=AUTH)
        redoc = await client.get("/redoc", headers=AUTH)
    assert denied.status_code == 401
    for answer in (docs, redoc):
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        assert answer.headers["content-security-policy"] == CSP
        assert "cdn" not in answer.text.lower() and "swagger" not in answer.text.lower()
        assert_self_contained(answer.text)
        assert "<code>/v1/fleet</code>" in answer.text and "<code>/v1/jobs/{job_id}/wait</code>" in answer.text
        assert "Jobs, newest first" in answer.text and "only jobs in this status" in answer.text


def test_the_docs_page_escapes_every_text_of_the_schema() -> None:
    schema = {
        "info": {"title": "<script>t</script>", "version": "1"},
        "paths": {
            "/x/{<b>}": {
                "get": {
                    "summary": "<img src=x onerror=alert(1)>",
                    "parameters": [{"name": "<i>", "in": "query", "schema": {"type": "string"}, "description": "<u>"}],
                    "responses": {"200": {"description": "<s>"}},
                }
            }
        },
    }
    page = docs_page(schema)
    assert_self_contained(page)
    assert [tag for tag, _ in parse(page).tags if tag in ("script", "img", "b", "i", "u", "s")] == []
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;script&gt;t&lt;/script&gt;" in page


# ---------------------------------------------------------------------------------------------------------------------
# the embedded server


def test_the_embedded_server_serves_the_page_and_names_it_once_on_stderr(
    make_embedded: Callable[..., EmbeddedServer], capsys: pytest.CaptureFixture[str]
) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    with httpx.Client(base_url=embedded.url, trust_env=False, timeout=30) as client:
        page = client.get("/")
        script = client.get("/static/dashboard/dashboard.js")
        fleet = client.get("/v1/fleet")
        keyed = client.get("/v1/fleet", headers={"Authorization": f"Bearer {embedded.api_key}"})
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert script.status_code == 200 and script.headers["content-type"] == ASSETS["dashboard.js"]
    assert fleet.status_code == 401 and keyed.status_code == 200
    lines = [line for line in capsys.readouterr().err.splitlines() if "dashboard at" in line]
    assert len(lines) == 1
    match = re.fullmatch(
        r"flashpoint: dashboard at (\S+) \(key in (\S+); FLASHPOINT_DASHBOARD=0 turns it off\)", lines[0]
    )
    assert match is not None, lines
    assert match.group(1) == embedded.url + "/"
    assert json.loads(Path(match.group(2)).read_text())["key"] == embedded.api_key


def test_flashpoint_dashboard_0_turns_the_embedded_page_and_its_line_off(
    make_embedded: Callable[..., EmbeddedServer], capsys: pytest.CaptureFixture[str]
) -> None:
    embedded = make_embedded("NVIDIA_H200:1", FLASHPOINT_DASHBOARD="0")
    with httpx.Client(base_url=embedded.url, trust_env=False, timeout=30) as client:
        assert client.get("/").status_code == 404
        assert client.get("/static/dashboard/dashboard.js").status_code == 404
    assert "dashboard" not in capsys.readouterr().err


def test_the_line_says_when_the_key_file_could_not_be_written() -> None:
    assert "could not be written" in dashboard_line("http://127.0.0.1:1", None)
    assert dashboard_line("http://127.0.0.1:1", Path("/k.json")).startswith(
        "flashpoint: dashboard at http://127.0.0.1:1/ (key in /k.json;"
    )


@pytest.mark.parametrize(
    ("value", "on"), [(None, True), ("", True), ("1", True), ("yes", True), ("0", False), ("off", False)]
)
def test_the_dashboard_setting(value: str | None, on: bool) -> None:
    env = {} if value is None else {"FLASHPOINT_DASHBOARD": value}
    assert Settings.load(env).dashboard is on


def test_a_bad_dashboard_setting_says_what_to_write() -> None:
    with pytest.raises(ConfigError, match="FLASHPOINT_DASHBOARD must be 1 or 0"):
        Settings.load({"FLASHPOINT_DASHBOARD": "maybe"})


SCRIPT = textwrap.dedent(
    """
    import sys, urllib.request
    from flashpoint.config import Settings
    from flashpoint.hosting.embedded import EmbeddedServer

    server = EmbeddedServer(Settings.load(env={"FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1",
                                               "FLASHPOINT_STATE_DIR": sys.argv[1]})).start()
    try:
        status = [urllib.request.urlopen(server.url + path, timeout=10).status
                  for path in ("/", "/static/dashboard/dashboard.js")]
    finally:
        server.close()
    print(status, "fastapi" in sys.modules)
    """
)


def test_the_embedded_page_costs_no_fastapi_import(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "state")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[200, 200] False"
    assert result.stderr.count("flashpoint: dashboard at ") == 1
