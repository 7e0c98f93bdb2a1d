"""``flashpoint secret set|list|delete``: a server's secrets, which endpoints name in their ``env``
(``flashpoint.Secret("name")`` or ``{{ RUNPOD_SECRET_name }}``). A value is read from stdin, or from a hidden prompt
at a terminal; never from an argument, where shell history and ``ps`` would show it.

The server is ``--url``/``--key`` (``FLASHPOINT_URL``/``FLASHPOINT_API_KEY``), else the one ``flashpoint serve`` of
this machine; with several, the command lists them and asks for ``--url`` instead of choosing. ``--data-dir DIR``
acts on a server's data directory itself, with no server running (a server that refused to start for a secret it
lacks is the case): the same store, on this machine, as this user.

Edge module: may import anything in flashpoint, plus typer and httpx (through ``cli.live``).
"""

from __future__ import annotations

import datetime
import getpass
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from flashpoint.cli.live import LivePlane
from flashpoint.cli.output import print_json
from flashpoint.cli.target import KeyOption, UrlOption, one_server, seg
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.hosting.secretstore import SecretStore
from flashpoint.spec import secret_name_problem
from flashpoint.terminal import inert

app = typer.Typer(
    name="secret",
    help="A server's secrets, which endpoints name in their env: set (the value from stdin or a prompt), list, delete.",
    no_args_is_help=True,
)

NameArgument = Annotated[str, typer.Argument(help="The secret's name, e.g. HF_TOKEN.", show_default=False)]
AppOption = Annotated[
    str | None, typer.Option("--app", "-a", help="The app the secret belongs to (default: server-wide).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Act on this server data directory directly, with no server running (serve's --data-dir, by default "
        "~/.flashpoint/server).",
        show_default=False,
    ),
]


class _Local:
    """The store of a data directory, with the verbs the commands use (``--data-dir``)."""

    def __init__(self, data_dir: Path) -> None:
        self.store = SecretStore(data_dir.expanduser() / "secrets")

    def set(self, name: str, value: str, app: str | None) -> None:
        self.store.set(name, value, app=app)

    def list(self, app: str | None) -> list[dict[str, Any]]:
        infos = self.store.list(app=app, every=app is None)
        return [{"name": i.name, "app": i.app, "created": i.created, "updated": i.updated} for i in infos]

    def delete(self, name: str, app: str | None) -> None:
        if not self.store.delete(name, app=app):
            raise NotFoundError(f"no secret {name!r}" + (f" of app {app!r}" if app else " (server-wide)"))


def server(url: str | None, key: str | None) -> LivePlane:
    """The one server a secret command talks to (secrets live in ``flashpoint serve``'s data directory): ``--url``,
    else the one ``flashpoint serve`` of this machine; several are listed and refused (``target.one_server``)."""
    return one_server(url, key)


def read_value(name: str) -> str:
    """The value: a hidden prompt at a terminal, else all of stdin less one final line break (what ``echo`` adds)."""
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of {name} (not shown): ")
    else:
        value = sys.stdin.read()
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise BadInputError(f"no value for secret {name!r}: pipe it in (e.g. `printenv HF_TOKEN | flashpoint ...`)")
    return value


def _when(seconds: Any) -> str:
    return datetime.datetime.fromtimestamp(float(seconds), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@app.command("set")
def set_secret(
    name: NameArgument,
    app_name: AppOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Set secret NAME (for --app, or server-wide) to the value read from stdin, or from a hidden prompt."""
    problem = secret_name_problem(name)
    if problem is not None:  # before asking for a value that could not be kept
        raise BadInputError(problem)
    if data_dir is not None:
        _Local(data_dir).set(name, read_value(name), app_name)
    else:
        plane = server(url, key)  # found before the value is asked for
        params = {"app": app_name} if app_name is not None else None
        plane.request("PUT", f"/v1/secrets/{seg(name)}", params=params, body={"value": read_value(name)})
    print(inert(f"secret {name} set" + (f" for app {app_name}" if app_name else " (server-wide)")))


@app.command("list")
def list_secrets(
    app_name: AppOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    data_dir: DataDirOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the secrets: names, apps and dates (never values); --app: the server-wide ones and that app's."""
    params = {"app": app_name} if app_name is not None else None
    if data_dir is not None:
        secrets = _Local(data_dir).list(app_name)
    else:
        secrets = server(url, key).request("GET", "/v1/secrets", params=params)["secrets"]
    if json_output:
        print_json(secrets)
        return
    if not secrets:
        print("no secrets; set one with: flashpoint secret set NAME < value-file")
        return
    for secret in secrets:
        owner = f"app {secret['app']}" if secret["app"] else "server-wide"
        dates = f"created {_when(secret['created'])}  updated {_when(secret['updated'])}"
        print(inert(f"{secret['name']}  {owner}  {dates}"))


@app.command("delete")
def delete_secret(
    name: NameArgument,
    app_name: AppOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Delete secret NAME (of --app, or the server-wide one)."""
    params = {"app": app_name} if app_name is not None else None
    if data_dir is not None:
        _Local(data_dir).delete(name, app_name)
    else:
        server(url, key).request("DELETE", f"/v1/secrets/{seg(name)}", params=params)
    print(inert(f"secret {name} deleted"))
