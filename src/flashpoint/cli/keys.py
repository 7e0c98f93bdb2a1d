"""``flashpoint keys create|list|revoke``: a server's scoped API keys (decisions 0093 and 0094). ``create`` prints the
new key once; nothing shows it again (the server keeps only its hash).

The server is ``--url``/``--key`` (``FLASHPOINT_URL``/``FLASHPOINT_API_KEY``: an admin key), else the one
``flashpoint serve`` of this machine; with several, the command lists them and asks for ``--url`` instead of
choosing. ``--data-dir DIR`` acts on a server's data directory itself, with no server running (the first key of a
server, made by the person who runs it).

Edge module: may import anything in flashpoint, plus typer and httpx (through ``cli.live``).
"""

from __future__ import annotations

import datetime
import getpass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flashpoint.cli.live import LivePlane
from flashpoint.cli.output import console, print_json
from flashpoint.cli.secret import DataDirOption
from flashpoint.cli.target import KeyOption, UrlOption, one_server, seg
from flashpoint.errors import NotFoundError
from flashpoint.hosting.keystore import SCOPES, KeyStore
from flashpoint.terminal import inert

app = typer.Typer(
    name="keys",
    help="A server's API keys with scopes (admin, deploy, invoke), for an app or an environment: create, list, revoke.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
#: the folder of a data directory that holds the keys (``flashpoint serve`` mounts the same one)
KEYS_FOLDER = "keys"


def local_store(data_dir: Path) -> KeyStore:
    """The key store of the server data directory ``data_dir``."""
    return KeyStore(data_dir.expanduser() / KEYS_FOLDER)


def server(url: str | None, key: str | None) -> LivePlane:
    """The one server a keys command talks to: ``--url``, else the one ``flashpoint serve`` of this machine; several
    are listed and refused (``target.one_server``)."""
    return one_server(url, key)


def _json(info: Any) -> dict[str, Any]:
    return {"name": info.name, "scope": info.scope, "app": info.app, "env": info.env, "created": info.created,
            "created_by": info.created_by}  # fmt: skip


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no name (a container's): the creator is still this machine's user
        return "local user"


def _when(seconds: Any) -> str:
    return datetime.datetime.fromtimestamp(float(seconds), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", "-n", help="The key's name, e.g. ci-deploy.", show_default=False)],
    scope: Annotated[
        str, typer.Option("--scope", help=f"What the key may do: {', '.join(SCOPES)}.", show_default=False)
    ],
    app_name: Annotated[str | None, typer.Option("--app", "-a", help="The app it is for (default: every app).")] = None,
    env_name: Annotated[str | None, typer.Option("--env", "-e", help="The app's environment it is for.")] = None,
    url: UrlOption = None,
    key: KeyOption = None,
    data_dir: DataDirOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a key and print it once: copy it now, it will not be shown again."""
    if data_dir is not None:
        info, token = local_store(data_dir).create(
            name, scope=scope, app=app_name, env=env_name, by=f"{_user()} (--data-dir)"
        )
        made = {"key": token, **_json(info)}
    else:
        body = {"name": name, "scope": scope, "app": app_name, "env": env_name}
        made = server(url, key).request("POST", "/v1/keys", body={k: v for k, v in body.items() if v is not None})
    if json_output:
        print_json(made)
        return
    where = "" if made["app"] is None else f" for app {made['app']}" + (f", env {made['env']}" if made["env"] else "")
    print(inert(f"key {made['name']} ({made['scope']} scope{where}):"))
    print(inert(made["key"]))
    print("Copy it now: it will not be shown again (the server keeps only its hash).")


@app.command("list")
def list_keys(
    url: UrlOption = None,
    key: KeyOption = None,
    data_dir: DataDirOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the keys: names, scopes, apps, environments and dates (never the keys themselves)."""
    if data_dir is not None:
        keys = [_json(info) for info in local_store(data_dir).list()]
    else:
        keys = server(url, key).request("GET", "/v1/keys")["keys"]
    if json_output:
        print_json(keys)
        return
    if not keys:
        print("no keys; create one with: flashpoint keys create --name N --scope invoke --app A")
        return
    table = Table()
    for column in ("name", "scope", "app", "env", "created", "created by"):
        table.add_column(column)
    for k in keys:
        table.add_row(k["name"], k["scope"], k["app"] or "(every)", k["env"] or "(every)", _when(k["created"]),
                      k["created_by"])  # fmt: skip
    console().print(table)


@app.command("revoke")
def revoke(
    name: Annotated[str, typer.Argument(help="The key's name.", show_default=False)],
    url: UrlOption = None,
    key: KeyOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Revoke key NAME: it opens nothing from now on."""
    if data_dir is not None:
        if not local_store(data_dir).revoke(name):
            raise NotFoundError(f"no key {name[:80]!r}; `flashpoint keys list` shows them")
    else:
        server(url, key).request("DELETE", f"/v1/keys/{seg(name)}")
    print(inert(f"key {name} revoked"))
