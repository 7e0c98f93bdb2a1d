"""``flashpoint deploy [DIR]``: upload a project folder to a flashpoint server as the next version of an app's
environment and follow its rollout (Flash's ``flash deploy``; decisions 0097 and 0101). One implementation:
``flashpoint.deploy`` (``sdk/deploy.py``), with a progress callback that prints each stage.

The server is ``--url``/``--key`` (``FLASHPOINT_URL``/``FLASHPOINT_API_KEY``), else the one ``flashpoint serve`` of
this machine (``target.one_server``; several are listed and refused).

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flashpoint.cli.live import LivePlane
from flashpoint.cli.output import InertConsole, console, print_json
from flashpoint.cli.target import KeyOption, UrlOption, one_server
from flashpoint.hosting.appscan import declared_apps
from flashpoint.sdk.deploy import (
    DEFAULT_TIMEOUT_S,
    DeployResult,
    Progress,
    app_and_env,
    deploy as deploy_project,
)
from flashpoint.terminal import inert

AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        "-a",
        metavar="APP",
        show_default=False,
        help="The app (default: the project folder's name, as Flash does).",
    ),
]
EnvOption = Annotated[str, typer.Option("--env", "-e", metavar="ENV", help="The app's environment.")]
DeployEnvOption = Annotated[
    str | None,
    typer.Option(
        "--env",
        "-e",
        metavar="ENV",
        show_default=False,
        help="The app's environment (default: production; a runpod.App's own env, 'default' unless it names one).",
    ),
]


def server(url: str | None, key: str | None) -> LivePlane:
    """The one server a deploy command talks to: ``--url``, else the one ``flashpoint serve`` of this machine."""
    return one_server(url, key)


def exclusions(values: list[str] | None) -> list[str]:
    """``--exclude`` values as package names: repeated options and comma-separated lists (Flash's form) alike."""
    return [name.strip() for value in values or () for name in value.split(",") if name.strip()]


def progress_line(step: Progress) -> str:
    """One line of progress: the stage, the version once numbered, and the stage's detail."""
    version = f" (version {step.version})" if step.version is not None else ""
    detail = f": {step.detail}" if step.detail else ""
    return inert(f"{step.stage}{version}{detail}")


def result_table(result: DeployResult) -> Table:
    """The endpoints of a deployed version: name, id, kind, URL."""
    table = Table(title=inert(f"{result.app}/{result.env} version {result.version} serves"), title_justify="left")
    for column in ("name", "id", "kind", "url"):
        table.add_column(column)
    for endpoint in result.endpoints:
        table.add_row(endpoint.name, endpoint.id, endpoint.kind, endpoint.url)
    return table


def deploy(
    path: Annotated[
        Path, typer.Argument(metavar="DIR", help="The project folder to deploy.", show_default="the current folder")
    ] = Path("."),
    app_name: AppOption = None,
    env_name: DeployEnvOption = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="PACKAGES",
            show_default=False,
            help="Packages to leave out of the dependency install, comma-separated or repeated (Flash's --exclude, "
            "e.g. torch,transformers): the server drops them from every endpoint's dependencies; files are left "
            "out with .gitignore and .flashignore.",
        ),
    ] = None,
    url: UrlOption = None,
    key: KeyOption = None,
    json_output: Annotated[
        bool, typer.Option("--json", help='Print {"app", "env", "version", "endpoints"} (progress goes to stderr).')
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="SECONDS", help="How long to follow the rollout (it goes on after that)."),
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Deploy a project folder to a flashpoint server as the next version of APP's environment, and wait until it
    serves: upload, load, build, warm, switch. A version that fails leaves the one before serving."""
    if not timeout > 0:
        raise typer.BadParameter(f"must be a positive number of seconds, got {timeout}", param_hint="--timeout")
    # each Runpod SDK 2.x App of the project is its own app (decision 0108); else the folder's name; said before
    # the server is found, so a bad folder name is said first
    plans = [(a.name, env_name or a.env) for a in declared_apps(path)] if app_name is None else []
    if len(plans) < 2:
        plans = [app_and_env(path, app_name, env_name)]
    target = server(url, key)
    out = console()
    # under --json, progress goes to stderr: stdout is the JSON alone
    err = InertConsole(highlight=False, emoji=False, markup=False, file=sys.stderr) if json_output else out

    def on_stage(step: Progress) -> None:
        err.print(progress_line(step))

    results = [
        deploy_project(
            path,
            app=app,
            env=env,
            url=target.url,
            key=target.key or "",  # "": no key (not FLASHPOINT_API_KEY again: one_server already read it)
            timeout=timeout,
            exclude=exclusions(exclude),
            on_stage=on_stage,
        )
        for app, env in plans
    ]
    if json_output:  # one app: its object; several: a list of them
        print_json(results[0].to_json() if len(results) == 1 else [r.to_json() for r in results])
        return
    for result in results:
        out.print(result_table(result))
