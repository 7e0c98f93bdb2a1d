"""``flashpoint app list|get|delete``, ``flashpoint env list|create|get|delete``, ``flashpoint undeploy`` and
``flashpoint rollback``: a server's deployed apps, their environments and versions, over ``/v1/apps`` (Flash's
``flash app``, ``flash env`` and ``flash undeploy``; decisions 0097 and 0101).

Run inside a project folder named as the app, ``app get`` and ``env get`` also say whether the folder's code is what
serves: the folder is packed as ``flashpoint deploy`` would pack it and its digest compared with the serving version's.

The server is ``--url``/``--key`` (``FLASHPOINT_URL``/``FLASHPOINT_API_KEY``), else the one ``flashpoint serve`` of
this machine. Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from flashpoint.cli.deploy import EnvOption, progress_line, result_table, server
from flashpoint.cli.output import InertConsole, console, print_json
from flashpoint.cli.target import KeyOption, UrlOption
from flashpoint.errors import Error
from flashpoint.hosting.artifacts import pack
from flashpoint.sdk.deploy import DEFAULT_ENV, DEFAULT_TIMEOUT_S, DeployClient, Progress, default_app, follow
from flashpoint.terminal import inert

app_group = typer.Typer(
    name="app", help="A server's deployed apps: list, get, delete (Flash's flash app).", no_args_is_help=True
)
env_group = typer.Typer(
    name="env",
    help="An app's deployment environments: list, create, get (endpoints and versions), delete (Flash's flash env).",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
ForceOption = Annotated[
    bool, typer.Option("--force", "-f", "--yes", "-y", help="Do not ask for confirmation (Flash's --force).")
]
AppOption = Annotated[
    str | None,
    typer.Option("--app", "-a", metavar="APP", show_default=False, help="The app (default: this folder's name)."),
]
#: how many hex digits of a digest the tables show
SHORT_DIGEST = 12


def client(url: str | None, key: str | None) -> DeployClient:
    """The ``/v1/apps`` client of the one server these commands talk to."""
    target = server(url, key)
    return DeployClient(target.url, target.key)


def app_or_folder(name: str | None) -> str:
    """``--app``, else this folder's name (Flash's default app)."""
    return name or default_app(Path.cwd())


def when(seconds: Any) -> str:
    """A wall time in local time, to the second (``-`` when unknown)."""
    if not seconds:
        return "-"
    return datetime.datetime.fromtimestamp(float(seconds)).strftime("%Y-%m-%d %H:%M:%S")


def _table(title: str | None, columns: Sequence[str]) -> Table:
    table = Table(title=inert(title) if title else None, title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


def apps_table(apps: Sequence[dict[str, Any]]) -> Table:
    """``GET /v1/apps``'s apps: name, environments, who made it, when."""
    table = _table(None, ("app", "envs", "created by", "created"))
    for a in apps:
        table.add_row(a["name"], ", ".join(a.get("envs") or ()) or "-", a["created_by"], when(a["created_at"]))
    return table


def envs_table(envs: Sequence[dict[str, Any]], title: str | None = None) -> Table:
    """Environments (``EnvInfo``): name, the version serving, endpoints undeployed from it, who made it, when."""
    table = _table(title, ("env", "serving", "undeployed", "created by", "created"))
    for e in envs:
        serving = "-" if e.get("serving") is None else str(e["serving"])
        removed = ", ".join(e.get("removed") or ()) or "-"
        table.add_row(e["name"], serving, removed, e["created_by"], when(e["created_at"]))
    return table


def endpoints_table(endpoints: Sequence[dict[str, Any]]) -> Table:
    """An environment's endpoints: name, id, kind, URL."""
    table = _table("endpoints", ("name", "id", "kind", "url"))
    for e in endpoints:
        table.add_row(e["name"], e["id"], e["kind"], e["url"])
    return table


def versions_table(versions: Sequence[dict[str, Any]]) -> Table:
    """An environment's versions, newest first: number, who, when, digest (short), outcome, detail."""
    table = _table("versions", ("version", "by", "when", "digest", "outcome", "detail"))
    for v in sorted(versions, key=lambda v: int(v["number"]), reverse=True):
        table.add_row(str(v["number"]), v["created_by"], when(v["created_at"]), str(v["digest"])[:SHORT_DIGEST],
                      v["outcome"], v.get("detail") or "")  # fmt: skip
    return table


def env_summary(env: dict[str, Any]) -> str:
    """One line about an environment: what serves, what was undeployed."""
    serving = env.get("serving")
    line = f"{env['app']}/{env['name']}: " + ("nothing serves" if serving is None else f"version {serving} serves")
    removed = env.get("removed") or ()
    if removed:
        line += f" (undeployed: {', '.join(removed)})"
    return inert(line)


# ----------------------------------------------------------------------------------------------------------------
# is this folder's code what serves?


def serving_digest(body: dict[str, Any]) -> tuple[int, str] | None:
    """The serving version's number and digest from ``GET .../envs/{env}``'s answer; None when nothing serves."""
    number = body["env"].get("serving")
    for version in body.get("versions") or ():
        if version["number"] == number:
            return int(number), str(version["digest"])
    return None


def folder_note(app: str, env: str, serving: tuple[int, str] | None, folder: Path | None = None) -> str | None:
    """Whether ``folder`` (default: this one) holds the code that serves ``app``/``env``, when the folder is named
    as the app (Flash's default app); None when it is not, or nothing serves."""
    folder = (folder or Path.cwd()).resolve()
    if folder.name != app or serving is None:
        return None
    number, digest = serving
    try:
        local = pack(folder).digest
    except Error as exc:
        return inert(f"this folder could not be packed to compare it with version {number}: {exc}")
    if local == digest:
        return f"this folder is version {number}'s code"
    target = "" if env == DEFAULT_ENV else f" -e {env}"
    return inert(f"this folder differs from version {number} ({env}): run flashpoint deploy{target}")


# ----------------------------------------------------------------------------------------------------------------
# flashpoint app ...


@app_group.command("list")
def list_apps(url: UrlOption = None, key: KeyOption = None, json_output: JsonOption = False) -> None:
    """List the apps deployed to the server (those the key may see) and their environments."""
    with client(url, key) as c:
        apps = c.apps()
    if json_output:
        print_json({"apps": apps})
        return
    if not apps:
        print("no apps deployed; deploy one with: flashpoint deploy [DIR] --app APP")
        return
    console().print(apps_table(apps))


@app_group.command("get")
def get_app(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app.", show_default=False)],
    url: UrlOption = None,
    key: KeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show an app and its environments; inside a folder named as the app, whether its code is what serves."""
    with client(url, key) as c:
        body = c.app(name)
        if json_output:
            print_json(body)
            return
        envs = body["envs"]
        # the folder check needs each serving version's digest: asked only where the folder is named as the app
        here = Path.cwd().resolve().name == name
        serving = {e["name"]: serving_digest(c.env(name, e["name"])) for e in envs if here and e.get("serving")}
    out = console()
    info = body["app"]
    out.print(inert(f"app {info['name']}, created by {info['created_by']} at {when(info['created_at'])}"))
    if envs:
        out.print(envs_table(envs, title="environments"))
    else:
        out.print(f"no environments; deploy one with: flashpoint deploy --app {inert(name)} --env ENV")
    for env_name, found in serving.items():
        note = folder_note(name, env_name, found)
        if note:
            out.print(note)


@app_group.command("delete")
def delete_app(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app.", show_default=False)],
    force: ForceOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Undeploy every environment of an app and forget it, its versions and their history."""
    if not force:
        typer.confirm(inert(f"Undeploy every environment of app {name} and forget it?"), abort=True)
    with client(url, key) as c:
        c.delete_app(name)
    print(inert(f"app {name} deleted"))


# ----------------------------------------------------------------------------------------------------------------
# flashpoint env ...

EnvArgument = Annotated[
    str, typer.Argument(metavar="ENV", help="The environment, e.g. production.", show_default=False)
]


@env_group.command("list")
def list_envs(
    app_name: AppOption = None, url: UrlOption = None, key: KeyOption = None, json_output: JsonOption = False
) -> None:
    """List an app's environments: what serves in each."""
    name = app_or_folder(app_name)
    with client(url, key) as c:
        envs = c.envs(name)
    if json_output:
        print_json({"envs": envs})
        return
    console().print(envs_table(envs, title=f"environments of {name}"))


@env_group.command("create")
def create_env(
    env: EnvArgument,
    app_name: AppOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create an empty environment of an app (and the app, if new); `flashpoint deploy --env ENV` fills it."""
    name = app_or_folder(app_name)
    with client(url, key) as c:
        made = c.create_env(name, env)
    if json_output:
        print_json(made)
        return
    print(inert(f"environment {env} of app {name} created; deploy to it with: flashpoint deploy --app {name} -e {env}"))


@env_group.command("get")
def get_env(
    env: EnvArgument,
    app_name: AppOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show an environment: what serves, its endpoints with their ids and URLs, and its versions; inside a folder
    named as the app, whether its code is what serves."""
    name = app_or_folder(app_name)
    with client(url, key) as c:
        body = c.env(name, env)
    if json_output:
        print_json(body)
        return
    show_env(console(), body)


def show_env(out: Console, body: dict[str, Any], folder: Path | None = None) -> None:
    """``GET .../envs/{env}``'s answer for people: a summary, the endpoints, the versions, and the folder's note."""
    info = body["env"]
    out.print(env_summary(info))
    endpoints = body.get("endpoints") or []
    if endpoints:
        out.print(endpoints_table(endpoints))
    versions = body.get("versions") or []
    if versions:
        out.print(versions_table(versions))
    else:
        out.print(inert(f"no versions yet; deploy one with: flashpoint deploy --app {info['app']} -e {info['name']}"))
    note = folder_note(info["app"], info["name"], serving_digest(body), folder)
    if note:
        out.print(note)


@env_group.command("delete")
def delete_env(
    env: EnvArgument,
    app_name: AppOption = None,
    force: ForceOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Undeploy an environment and forget it, its versions and their history."""
    name = app_or_folder(app_name)
    if not force:
        typer.confirm(inert(f"Undeploy {name}/{env} and forget its versions?"), abort=True)
    with client(url, key) as c:
        c.delete_env(name, env)
    print(inert(f"environment {env} of app {name} deleted"))


# ----------------------------------------------------------------------------------------------------------------
# flashpoint undeploy, flashpoint rollback


def undeploy(
    endpoint: Annotated[
        str | None, typer.Argument(metavar="NAME", help="One endpoint to take down.", show_default=False)
    ] = None,
    app_name: AppOption = None,
    env_name: EnvOption = DEFAULT_ENV,
    every: Annotated[bool, typer.Option("--all", help="Take down every endpoint of the environment.")] = False,
    force: ForceOption = False,
    url: UrlOption = None,
    key: KeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Take down endpoint NAME of an app's environment, or every endpoint with --all. The versions stay: `flashpoint
    rollback` or the next deploy serves again."""
    if (endpoint is None) == (not every):
        raise typer.BadParameter(
            "name one endpoint to take down, or pass --all for every endpoint (not both)", param_hint="NAME"
        )
    name = app_or_folder(app_name)
    what = f"endpoint {endpoint} of {name}/{env_name}" if endpoint else f"every endpoint of {name}/{env_name}"
    if not force:
        typer.confirm(inert(f"Take down {what}?"), abort=True)
    with client(url, key) as c:
        info = c.undeploy(name, env_name, endpoint=endpoint)
    if json_output:
        print_json(info)
        return
    print(inert(f"took down {what}"))
    print(env_summary(info))


def rollback(
    app_name: AppOption = None,
    env_name: EnvOption = DEFAULT_ENV,
    to: Annotated[
        int | None,
        typer.Option("--to", metavar="N", min=1, show_default=False, help="The version (default: the one before)."),
    ] = None,
    url: UrlOption = None,
    key: KeyOption = None,
    json_output: Annotated[
        bool, typer.Option("--json", help='Print {"app", "env", "version", "endpoints"} (progress goes to stderr).')
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="SECONDS", help="How long to follow the switch (it goes on after that)."),
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Serve an older version of an app's environment again: the one before, or --to N. No new version is made."""
    name = app_or_folder(app_name)
    out = console()
    # under --json, progress goes to stderr: stdout is the JSON alone
    err = InertConsole(highlight=False, emoji=False, markup=False, file=sys.stderr) if json_output else out

    def on_stage(step: Progress) -> None:
        err.print(progress_line(step))

    with client(url, key) as c:
        first = c.rollback(name, env_name, to=to)
        done = follow(lambda: c.version(name, env_name, first.version), first, timeout_s=timeout, on_stage=on_stage)
    result = done.result()
    if json_output:
        print_json(result.to_json())
        return
    out.print(result_table(result))
