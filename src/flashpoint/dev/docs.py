"""``flashpoint dev``'s ``/docs``: every URL of a project's layout on one self-contained HTML page (inline style, no
script, nothing fetched), each with a curl example built from the signature.

Pure: standard library and ``dev.layout`` only.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from typing import Any

from flashpoint.dev.layout import Layout, RouteEntry

__all__ = ["docs_page"]


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;width:100%}"
    "td,th{border-bottom:1px solid #ddd;padding:.5em;text-align:left;vertical-align:top}"
    "code,pre{font-family:ui-monospace,monospace;font-size:.9em}pre{background:#f4f4f4;padding:.5em;"
    "white-space:pre-wrap;margin:.3em 0}.m{font-weight:bold}.note{color:#666}"
)


def _curl(method: str, url: str, body: Any | None, keyed: bool) -> str:
    words = ["curl", "-X", method, shlex.quote(url)]
    if keyed:
        words += ["-H", '"Authorization: Bearer $FLASHPOINT_API_KEY"']
    if body is not None:
        words += ["-H", shlex.quote("Content-Type: application/json"), "-d", shlex.quote(json.dumps(body))]
    return " ".join(words)


def _route_example(entry: RouteEntry, base: str, keyed: bool) -> str:
    example = dict(entry.example)
    path = re.sub(r"\{([^{}:]+)(?::[^{}]+)?\}", lambda m: str(example.pop(m.group(1), None) or m.group(1)), entry.path)
    if entry.method == "GET":
        query = "&".join(f"{k}={v}" for k, v in example.items() if isinstance(v, str | int | float))
        return _curl("GET", base + path + (f"?{query}" if query else ""), None, keyed)
    return _curl(entry.method, base + path, example, keyed)


def docs_page(layout: Layout, base: str, *, keyed: bool = False, title: str = "") -> str:
    """Every URL of the layout with its method, endpoint, function and a curl example, as one HTML page."""
    rows: list[str] = []

    def row(method: str, path: str, what: str, endpoint: str, doc: str, example: str) -> None:
        cells = (
            f'<td class="m">{html.escape(method)}</td><td><code>{html.escape(path)}</code></td>'
            f"<td>{html.escape(what)}</td><td>{html.escape(endpoint)}</td>"
            f"<td>{html.escape(doc)}<pre>{html.escape(example)}</pre></td>"
        )
        rows.append(f"<tr>{cells}</tr>")

    for call in layout.calls.values():
        body = {"input": dict(call.example)} if call.takes_input else None
        row("POST", call.path, call.name, call.endpoint, call.doc, _curl("POST", base + call.path, body, keyed))
    for entry in layout.routes:
        row(entry.method, entry.path, entry.name, entry.endpoint, entry.doc, _route_example(entry, base, keyed))
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in layout.problems)
    heading = html.escape(f"flashpoint dev{': ' + title if title else ''}")
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{heading}</title><style>{_STYLE}</style></head>'
        f"<body><h1>{heading}</h1><p>Queue endpoints answer <code>POST .../runsync</code> with "
        '<code>{"input": {...}}</code> (the function\'s arguments) and wait for the result; route endpoints answer '
        "their own paths. Each endpoint is also served by name on Runpod's API "
        "(<code>/v2/&lt;endpoint&gt;/run</code>, <code>/runsync</code>, <code>/status/&lt;id&gt;</code>, ...).</p>"
        "<table><tr><th>Method</th><th>Path</th><th>Function</th><th>Endpoint</th><th>Example</th></tr>"
        f"{''.join(rows)}</table>"
        + (f'<h2>Left out</h2><ul class="note">{problems}</ul>' if problems else "")
        + "</body></html>"
    )
