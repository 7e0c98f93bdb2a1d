"""The ``flashpoint`` command line: one module per command, joined here; ``main`` turns errors into one line.

Edge module, the top of the import graph: may import anything in flashpoint, plus typer, rich and httpx. Nothing
imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from flashpoint._version import __version__
from flashpoint.cli import (
    apps,
    deploy,
    dev,
    explain,
    gpus,
    jobs,
    keys,
    quota,
    run,
    secret,
    serve,
    simulate,
    status,
    venv,
)
from flashpoint.cli.usage import usage as usage_command
from flashpoint.errors import Error
from flashpoint.terminal import inert

__all__ = ["app", "main"]

app = typer.Typer(
    name="flashpoint",
    help="Runpod Flash-style GPU endpoints on your own GPUs.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_show_locals=False,
)
app.command("status")(status.status)
app.command("usage")(usage_command)
app.command("gpus")(gpus.gpus)
app.command("explain")(explain.explain)
app.command("jobs")(jobs.jobs)
app.command("job")(jobs.job)
app.command("logs")(jobs.logs)
app.command("cancel")(jobs.cancel)
app.command("retry")(jobs.retry)
app.command("call")(jobs.call)
app.command("serve")(serve.serve)
app.command("ray-flags")(gpus.ray_flags)
app.command("run", context_settings=run.CONTEXT)(run.run)
app.command("dev")(dev.dev)
app.add_typer(venv.app, name="venv")
app.add_typer(secret.app, name="secret")
app.add_typer(keys.app, name="keys")
app.add_typer(quota.app, name="quota")
app.command("deploy")(deploy.deploy)
app.command("simulate")(simulate.simulate)
app.command("undeploy")(apps.undeploy)
app.command("rollback")(apps.rollback)
app.add_typer(apps.app_group, name="app")
app.add_typer(apps.env_group, name="env")


def _version(value: bool) -> None:
    if value:
        print(f"flashpoint {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Runpod Flash-style GPU endpoints on your own GPUs."""


def main(args: Sequence[str] | None = None) -> None:
    """Run the CLI: ``flashpoint ...`` and ``python -m flashpoint ...``.

    A flashpoint ``Error`` is what the user can act on, so it becomes ``Error: <message>`` on stderr and exit code 1
    (inert: the message may quote a plane's answer or a job's error); anything else is a bug and keeps its traceback.
    """
    try:
        app(args=list(args) if args is not None else None, prog_name="flashpoint")
    except Error as exc:
        print(inert(f"Error: {exc}"), file=sys.stderr)
        sys.exit(1)
