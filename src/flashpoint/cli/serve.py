"""``flashpoint serve [APP]``: the team's GPU server: the apps deployed to it, and the endpoints of APP (a file, a
module or a project folder) when given, behind Runpod's HTTP API, with durable jobs.

Edge module: may import anything in flashpoint, plus typer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.hosting import console
from flashpoint.hosting.artifacts import DEFAULT_LIMIT
from flashpoint.hosting.server import GRACE_S, Server
from flashpoint.scheduler.jobbook import MAX_QUEUED_BYTES, MAX_QUEUED_JOBS
from flashpoint.spec import LABEL, PRIORITY_CLASSES
from flashpoint.wire import codec

_V = TypeVar("_V")

#: ``--data-dir``'s default, as the issue fixes it (``~`` is expanded by the server)
DEFAULT_DATA_DIR = Path("~/.flashpoint/server")
_MIB = 1024 * 1024


#: the edge's limits, as `serve` and `dev` take them
MaxConnectionsOption = Annotated[
    int | None,
    typer.Option(
        help="Most open client connections; past it the oldest one without a request is closed, else new ones "
        "are refused (default: 4096, or less under a low open-file limit)."
    ),
]
HeaderTimeoutOption = Annotated[
    float, typer.Option(help="Seconds a request's headers may take to arrive before the connection is closed.")
]
BodyTimeoutOption = Annotated[
    float, typer.Option(help="Seconds a request's body may take to arrive, once its headers are in.")
]


def serve(
    app: Annotated[
        str | None,
        typer.Argument(
            help="The app to serve from the start: path/to/app.py or package.module, optionally :attr; or a project "
            "folder (every .py file its .gitignore and .flashignore keep, as `flashpoint dev` reads it). None: an "
            "empty server, for the apps `flashpoint deploy` sends it."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs an API key.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one and prints it).")] = 8000,
    db: Annotated[
        Path | None, typer.Option(help="SQLite file that keeps every accepted job (default: DATA_DIR/jobs.db).")
    ] = None,
    data_dir: Annotated[
        Path,
        typer.Option(
            envvar="FLASHPOINT_DATA_DIR",
            help="The server's data directory: its jobs, the apps deployed to it (versions and their files), its "
            "keys and the secrets endpoints name.",
        ),
    ] = DEFAULT_DATA_DIR,
    max_artifact_mb: Annotated[
        float, typer.Option(help="Largest project `flashpoint deploy` may upload, in MB (Flash's limit: 1500).")
    ] = DEFAULT_LIMIT / _MIB,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help="An accepted API key (repeat for several); adds to FLASHPOINT_API_KEY."),
    ] = None,
    simulated_gpus: Annotated[
        str | None,
        typer.Option(help="Simulated devices, e.g. 'NVIDIA_H200:1,NVIDIA_L40S:2' (as FLASHPOINT_SIMULATED_GPUS)."),
    ] = None,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body a client may send, in MiB.")] = 10.0,
    backend: Annotated[
        str | None,
        typer.Option(help="Where workers run: 'local' (this machine) or 'ray' (a Ray cluster); as FLASHPOINT_BACKEND."),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="The Ray cluster to join, e.g. 10.0.0.5:6379 or 'auto'; as FLASHPOINT_RAY_ADDRESS."),
    ] = None,
    worker_url: Annotated[
        str | None,
        typer.Option(help="This server's URL as workers on other nodes reach it; as FLASHPOINT_WORKER_URL."),
    ] = None,
    allow_pickle: Annotated[
        bool,
        typer.Option(help="Accept pickled (non-JSON) arguments from SDK clients; they can run code on this server."),
    ] = False,
    allow_private_webhooks: Annotated[
        bool,
        typer.Option(
            help="Let webhooks reach loopback, private and other non-public addresses (any API key holder chooses "
            "the URL); as FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS=1."
        ),
    ] = False,
    max_connections: MaxConnectionsOption = None,
    header_timeout_s: HeaderTimeoutOption = 10.0,
    body_timeout_s: BodyTimeoutOption = 60.0,
    max_result_mb: Annotated[
        float, typer.Option(help="Largest result a worker may post, in MiB; a larger output fails its job.")
    ] = codec.MAX_RESULT_BYTES / _MIB,
    max_queued_jobs: Annotated[
        int, typer.Option(help="Most jobs waiting in all queues; past it /run answers 429 queue_full.")
    ] = MAX_QUEUED_JOBS,
    max_queued_mb: Annotated[
        float, typer.Option(help="Most MiB of input waiting in all queues; past it /run answers 429 queue_full.")
    ] = MAX_QUEUED_BYTES / _MIB,
    route_wait_s: Annotated[
        float | None,
        typer.Option(
            help="Seconds a request to an HTTP-route endpoint waits for a ready worker (a cold start included) before "
            "503 no_worker with the endpoint's explanation; as FLASHPOINT_ROUTE_WAIT_S (default 60)."
        ),
    ] = None,
    grace_s: Annotated[
        float,
        typer.Option(
            help="On SIGTERM or SIGINT: seconds the running jobs and requests get to finish (no new work is taken) "
            "before workers stop; jobs cut short go back to the queue, counted as a retry."
        ),
    ] = GRACE_S,
    priority_class: Annotated[
        list[str] | None,
        typer.Option(
            help="A priority class NAME=RANK beside high=2, normal=1 and low=0 (a higher rank goes first; repeat "
            "for more), for Endpoint(priority=NAME)."
        ),
    ] = None,
    app_weight: Annotated[
        list[str] | None,
        typer.Option(
            help="An app's fair-share weight APP=W (1 when not named): a freed device goes to the app holding the "
            "fewest devices over its weight. Repeat for more apps."
        ),
    ] = None,
    preempt_grace_s: Annotated[
        float | None,
        typer.Option(
            help="Seconds a preempted worker (of a preemptible endpoint, for a higher class) has to stop before it "
            "is killed; its jobs go back to their queue. As FLASHPOINT_PREEMPT_GRACE_S (default 30)."
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            help="debug, info, warning or error: info shows a line per finished job; warning only failures; debug "
            "also the workers' own debug lines."
        ),
    ] = "info",
) -> None:
    """Serve the apps deployed to this server (`flashpoint deploy`) and APP when given (a file, a module or a project
    folder): Runpod's /v2 API, HTTP-route endpoints under /NAME/, the native /v1 API and /metrics, until SIGINT or
    SIGTERM."""
    if log_level.lower() not in console.LEVEL_NAMES:
        raise ConfigError(f"--log-level is one of {', '.join(console.LEVEL_NAMES)}; got {log_level!r}")
    console.configure(log_level.lower())
    env = dict(os.environ)
    for name, value in (
        ("FLASHPOINT_SIMULATED_GPUS", simulated_gpus),
        ("FLASHPOINT_BACKEND", backend),
        ("FLASHPOINT_RAY_ADDRESS", ray_address),
        ("FLASHPOINT_WORKER_URL", worker_url),
    ):
        if value is not None:
            env[name] = value
    settings = Settings.load(env)
    keys = _api_keys(settings.api_key, api_key or [])
    if max_body_mb <= 0:
        raise ConfigError(f"--max-body-mb must be positive, got {max_body_mb}")
    Server(
        app,
        settings=settings,
        host=host,
        port=port,
        db=db,
        data_dir=data_dir,
        max_artifact_bytes=int(max_artifact_mb * _MIB),
        api_keys=tuple(keys),
        max_body_bytes=int(max_body_mb * _MIB),
        allow_pickle=allow_pickle,
        allow_private_webhooks=allow_private_webhooks or settings.allow_private_webhooks,
        max_connections=max_connections,
        header_timeout_s=header_timeout_s,
        body_timeout_s=body_timeout_s,
        max_result_bytes=int(max_result_mb * _MIB),
        max_queued_jobs=max_queued_jobs,
        max_queued_bytes=int(max_queued_mb * _MIB),
        route_wait_s=route_wait_s,
        grace_s=grace_s,
        priority_classes={**PRIORITY_CLASSES, **pairs("--priority-class", priority_class or [], _rank)},
        app_weights=pairs("--app-weight", app_weight or [], _weight),
        preempt_grace_s=preempt_grace_s,
    ).run()


def pairs(option: str, values: list[str], read: Callable[[str], _V]) -> dict[str, _V]:
    """``NAME=VALUE`` options as a dict, each value through ``read`` (a ValueError is the option's ConfigError)."""
    found: dict[str, _V] = {}
    for item in values:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not LABEL.match(name):
            raise ConfigError(f"{option} takes NAME=VALUE (a name of letters, digits, '.', '_', '-'), got {item!r}")
        try:
            found[name] = read(value.strip())
        except ValueError as exc:
            raise ConfigError(f"{option} {item!r}: {exc}") from None
    return found


def _rank(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the rank is a whole number (high is 2, normal 1, low 0), got {text!r}") from None


def _weight(text: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"the weight is a positive number (1 is an equal share), got {text!r}")
    return weight


def _api_keys(env_value: str | None, options: list[str]) -> list[str]:
    """The accepted keys, stripped: FLASHPOINT_API_KEY's comma list (blank items dropped) plus each ``--api-key``.

    A key that is blank after stripping matches no request, yet would satisfy the rule that a server bound beyond
    loopback needs a key: an explicitly blank ``--api-key``, or a FLASHPOINT_API_KEY holding only blanks, is refused.
    """
    keys = [k.strip() for k in (env_value or "").split(",") if k.strip()]
    if env_value and not keys:
        raise ConfigError(
            f"FLASHPOINT_API_KEY is set but holds no key ({env_value!r}); set it to one or more keys separated by "
            "commas, e.g. FLASHPOINT_API_KEY=$(openssl rand -hex 24), or unset it"
        )
    for option in options:
        if not option.strip():
            raise ConfigError(
                f"--api-key {option!r} is blank, so no request could match it; pass a real key, e.g. "
                "--api-key $(openssl rand -hex 24), or leave the option out"
            )
        keys.append(option.strip())
    return keys
