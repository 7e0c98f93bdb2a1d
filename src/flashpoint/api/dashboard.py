"""The web dashboard: one static page at ``/`` and its assets under ``/static/dashboard/``, served by ``flashpoint
serve`` and by the embedded server; and the self-contained ``/docs`` page that replaces FastAPI's Swagger UI (which
loads its script and style from a CDN).

The page holds no data: its script reads the native ``/v1`` API with the server's API key (asked once, kept in the
tab's ``sessionStorage``, sent as ``Authorization: Bearer``), so the page and its assets are served without a key. It
inserts nothing from the API as HTML, and its Content-Security-Policy allows only its own script and style (no
inline script, nothing from another origin). Assets live in the package (``flashpoint/dashboard/``), are read once and
kept in memory, and are served by name from a fixed list (no path from the request reaches the file system).

Plain Starlette and the standard library, so the embedded server serves the page without importing FastAPI.
"""

from __future__ import annotations

import functools
import hashlib
import html
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from flashpoint.api.workers import error_response

if TYPE_CHECKING:
    from fastapi import FastAPI

#: where the page's assets are served
ASSET_PREFIX = "/static/dashboard/"
#: the files of ``flashpoint/dashboard/`` that are served, and their media types (nothing else is); ``dashboard.js`` is
#: the page's module script, which imports the other modules by relative path
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "fleet.js": "text/javascript; charset=utf-8",
    "jobs.js": "text/javascript; charset=utf-8",
    "state.js": "text/javascript; charset=utf-8",
    "usage.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: the page's policy: its own script, style and images, API calls to this server only; no inline script or style, no
#: plugin, no framing, no <base> and no form posted elsewhere
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: headers of every dashboard answer (the page, its assets, the docs page)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidate (ETag): an upgraded server's page is never stale
}


@dataclass(frozen=True, slots=True)
class Asset:
    """One served file: its bytes, media type and entity tag."""

    body: bytes
    media_type: str
    etag: str


@functools.cache
def asset(name: str) -> Asset:
    """The asset ``name`` (one of ``ASSETS``), read from the package once."""
    body = resources.files("flashpoint").joinpath("dashboard").joinpath(name).read_bytes()
    return Asset(body, ASSETS[name], '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def _answer(request: Request, item: Asset) -> Response:
    headers = {**HEADERS, "ETag": item.etag}
    if item.etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(item.body, media_type=item.media_type, headers=headers)


async def page(request: Request) -> Response:
    """``GET /``: the dashboard."""
    return _answer(request, asset("index.html"))


async def static(request: Request) -> Response:
    """``GET /static/dashboard/{name}``: one of the page's assets."""
    name = request.path_params["name"]
    if name not in ASSETS or name == "index.html":
        return error_response(404, "not_found", f"no dashboard asset {name!r}")
    return _answer(request, asset(name))


def dashboard_routes() -> list[Route]:
    """The page and its assets, for a server's router (``HEAD`` is answered too)."""
    return [
        Route("/", page, methods=["GET"], name="dashboard"),
        Route(ASSET_PREFIX + "{name}", static, methods=["GET"], name="dashboard_asset"),
    ]


# ---------------------------------------------------------------------------------------------------------------------
# /docs: the OpenAPI schema as one page, nothing fetched


def replace_docs(app: FastAPI) -> None:
    """Serve ``docs_page`` of the app's schema at its ``/docs`` and ``/redoc`` instead of FastAPI's pages, which load
    Swagger UI and ReDoc from a CDN. Call before ``native.require_key_for_docs``, which puts them behind the key."""
    paths = {app.docs_url, app.redoc_url} - {None}
    for route in app.router.routes:
        if isinstance(route, Route) and route.path in paths:
            route.app = _docs_app(app)


def _docs_app(app: FastAPI) -> Any:
    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        body = docs_page(app.openapi()).encode()
        await Response(body, media_type="text/html; charset=utf-8", headers=HEADERS)(scope, receive, send)

    return serve


def docs_page(schema: dict[str, Any]) -> str:
    """Every operation of an OpenAPI schema (method, path, summary, description, parameters, answers) as one HTML
    page: the package's stylesheet, no script, every text escaped."""
    esc = html.escape
    info = schema.get("info", {})
    title = f"{info.get('title', 'API')} {info.get('version', '')}".strip()
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f'<link rel="icon" href="{ASSET_PREFIX}favicon.svg"><link rel="stylesheet" href="{ASSET_PREFIX}dashboard.css">'
        f'</head><body class="docs"><header><h1>{esc(title)}</h1><a href="/">dashboard</a></header><main>',
        f"<p>{esc(info.get('summary') or info.get('description') or '')}</p>",
        "<p>Every route needs the server's API key when it has one: <code>Authorization: Bearer KEY</code>. "
        'The schema itself is at <a href="/openapi.json"><code>/openapi.json</code></a>.</p>',
    ]
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            if not isinstance(op, dict):
                continue
            parts.append(
                f'<section class="op"><h2><span class="method">{esc(method.upper())}</span> '
                f"<code>{esc(path)}</code></h2><p>{esc(op.get('summary', ''))}</p>"
            )
            if op.get("description"):
                parts.append(f'<p class="note">{esc(op["description"])}</p>')
            params = op.get("parameters", [])
            if params:
                parts.append("<table><tr><th>Parameter</th><th>In</th><th>Type</th><th>Description</th></tr>")
                for param in params:
                    kind = _type_of(param.get("schema", {}))
                    required = " (required)" if param.get("required") else ""
                    parts.append(
                        f"<tr><td><code>{esc(str(param.get('name', '')))}</code>{required}</td>"
                        f"<td>{esc(str(param.get('in', '')))}</td><td>{esc(kind)}</td>"
                        f"<td>{esc(str(param.get('description', '')))}</td></tr>"
                    )
                parts.append("</table>")
            answers = op.get("responses", {})
            if answers:
                parts.append("<ul>")
                for code, answer in answers.items():
                    ref = answer.get("content", {}).get("application/json", {}).get("schema", {})
                    body = _type_of(ref)
                    parts.append(
                        f"<li><code>{esc(str(code))}</code> {esc(str(answer.get('description', '')))}"
                        + (f' <span class="note">({esc(body)})</span>' if body else "")
                        + "</li>"
                    )
                parts.append("</ul>")
            parts.append("</section>")
    parts.append("</main></body></html>")
    return "".join(parts)


def _type_of(schema: dict[str, Any]) -> str:
    """A schema's type in a few words: a ``$ref``'s name, ``type``, or the choices of ``anyOf``."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type_of(choice) for choice in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(str(value) for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type_of(schema.get('items', {}))}"
    return str(kind) if kind else ""
