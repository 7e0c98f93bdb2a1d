"""``flashpoint dev [DIR]``: every endpoint of a project folder behind Runpod Flash's ``flash dev`` URLs, reloaded on
change.

Edge module: may import anything in flashpoint, plus typer.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from flashpoint.cli.serve import BodyTimeoutOption, HeaderTimeoutOption, MaxConnectionsOption, _api_keys
from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.hosting.console import inert_handler
from flashpoint.terminal import inert


def dev(
    folder: Annotated[Path, typer.Argument(help="The project folder: every .py file in it is scanned.")] = Path("."),
    host: Annotated[
        str, typer.Option(envvar="FLASH_HOST", help="Address to listen on; anything but loopback needs an API key.")
    ] = "localhost",
    port: Annotated[
        int,
        typer.Option(
            "--port", "-p", envvar="FLASH_PORT", help="Port to listen on; when busy, the next free of 20 (0: any)."
        ),
    ] = 8888,
    reload: Annotated[
        bool, typer.Option("--reload/--no-reload", help="Reload a changed file's endpoints; queued jobs stay.")
    ] = True,
    max_connections: MaxConnectionsOption = None,
    header_timeout_s: HeaderTimeoutOption = 10.0,
    body_timeout_s: BodyTimeoutOption = 60.0,
) -> None:
    """Serve every endpoint in a project folder with Flash's dev URLs (POST /<file>/runsync, /<file>/<function>/runsync,
    routes under /<file>/...; /docs lists them) on this machine's GPUs, reloading when a file changes."""
    logging.basicConfig(level=logging.INFO, handlers=[inert_handler()])  # worker lines and job errors come from others
    settings = Settings.load(dict(os.environ))
    keys = tuple(_api_keys(settings.api_key, []))
    for name, value in (("max-connections", max_connections), ("header-timeout-s", header_timeout_s),
                        ("body-timeout-s", body_timeout_s)):  # fmt: skip
        if value is not None and not value > 0:
            raise ConfigError(f"--{name} must be positive, got {value}")

    def say(text: str) -> None:
        print(inert(text), flush=True)

    from flashpoint.dev.server import DevServer  # FastAPI and the server: loaded when `dev` runs, not for every command

    DevServer(
        folder, settings=settings, host=host, port=port, reload=reload, api_keys=keys, max_connections=max_connections,
        header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s, say=say,
    ).run()  # fmt: skip
