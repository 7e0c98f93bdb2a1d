"""``--app/-a`` and ``--env/-e`` of ``status``, ``jobs``, ``logs`` and ``explain``: the app and deployment environment
to show (decision 0102), sent to the planes as ``?app=``/``?env=``; and how a row's app and environment are printed.

Edge module: may import anything in flashpoint, plus typer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from flashpoint.spec import APP_NAME, split_endpoint_id


def check_name(value: str | None) -> str | None:
    """An option's value when it can be an app's or an environment's name (no dots: ``app.env.name`` splits on them)."""
    if value is not None and not APP_NAME.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is no app or environment name (letters, digits, _ and -; no dots)")
    return value


AppFilterOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        "-a",
        metavar="APP",
        show_default=False,
        callback=check_name,
        help="Only the endpoints (and jobs) of this deployed app.",
    ),
]
EnvFilterOption = Annotated[
    str | None,
    typer.Option(
        "--env",
        "-e",
        metavar="ENV",
        show_default=False,
        callback=check_name,
        help="Only the endpoints (and jobs) of this deployment environment (of every app, unless --app names one).",
    ),
]


@dataclass(frozen=True, slots=True)
class AppFilter:
    """The app and environment a command shows (None: every one); endpoints outside any app match no filter."""

    app: str | None = None
    env: str | None = None

    @property
    def active(self) -> bool:
        return self.app is not None or self.env is not None

    def params(self) -> dict[str, str]:
        """The query parameters of ``GET /v1/endpoints`` and ``GET /v1/jobs``."""
        return {name: value for name, value in (("app", self.app), ("env", self.env)) if value is not None}

    def matches(self, key: str) -> bool:
        """Whether endpoint ``key`` (an id ``app.env.name``, or a bare name outside any app) passes the filter."""
        app, env = app_env(key)
        return (self.app is None or self.app == app) and (self.env is None or self.env == env)

    def __str__(self) -> str:
        """``app shop, environment production``."""
        parts = ([f"app {self.app}"] if self.app else []) + ([f"environment {self.env}"] if self.env else [])
        return ", ".join(parts) or "every app"


def app_env(key: str) -> tuple[str | None, str | None]:
    """The app and environment of endpoint ``key``; ``(None, None)`` outside any app."""
    parts = split_endpoint_id(key)
    return (None, None) if parts is None else (parts[0], parts[1])


def app_env_text(key: str) -> str:
    """``shop/production`` for an endpoint of an app, the empty string for one outside any app."""
    app, env = app_env(key)
    return "" if app is None else f"{app}/{env}"
