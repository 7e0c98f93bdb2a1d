"""The machine's pip configuration, translated into uv's options.

uv reads neither ``pip.conf`` nor ``PIP_*`` variables, yet a machine set up for pip (a private index, a wheel
directory, a constraints file, a corporate CA) expects every install on it to honour that set-up. So the builder asks
pip itself (``python -m pip config list``, which merges the global, user and site files and the ``PIP_*`` variables
exactly as pip does) and maps what it finds with ``uv_options``, a pure function.

Honoured (pip name -> uv):

    index-url         --index-url URL
    extra-index-url   --extra-index-url URL (each of the whitespace-separated URLs), and
                      --index-strategy unsafe-best-match: pip takes the best version from any index, uv by default
                      only from the first index that has the project; the machine's pip configuration trusts its
                      indexes alike, so its installs resolve as pip's would
    no-index          --no-index
    find-links        --find-links PATH_OR_URL (each)
    trusted-host      --allow-insecure-host HOST (each)
    constraint        -c FILE (each)
    pre               --prerelease allow
    cert              SSL_CERT_FILE=FILE (uv's variable for extra CA certificates)
    client-cert       SSL_CLIENT_CERT=FILE
    timeout           UV_HTTP_TIMEOUT=SECONDS (pip's ``default-timeout`` too)
    proxy             HTTPS_PROXY and HTTP_PROXY

Everything else (``disable-pip-version-check``, ``no-cache-dir``, ``user``, ...) is listed in ``UvOptions.ignored``.
Where a name is set in several places, pip's order of precedence holds: a ``PIP_*`` variable, then the ``[install]``
section, then ``[global]``.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["UvOptions", "parse_pip_config_list", "read_pip_config", "uv_options"]

#: sections of ``pip config list``, strongest first: ``:env:`` is the ``PIP_*`` variables
_SECTIONS = (":env:", "install", "global")
_TRUE = {"1", "true", "yes", "on"}
#: pip settings that take several whitespace-separated values
_MULTI = {"extra-index-url", "find-links", "trusted-host", "constraint"}


@dataclass(frozen=True)
class UvOptions:
    """What ``uv pip install`` needs to behave like this machine's pip."""

    #: command-line options, placed before the requirements
    args: tuple[str, ...] = ()
    #: variables added to uv's environment
    env: Mapping[str, str] = field(default_factory=dict)
    #: pip settings that have no uv counterpart here, as ``name``
    ignored: tuple[str, ...] = ()


def parse_pip_config_list(text: str) -> dict[str, str]:
    """The output of ``pip config list`` as ``{"section.name": value}``.

    pip prints one ``section.name='value'`` per line (the value as a Python literal); a line that does not parse is
    skipped rather than guessed at.
    """
    config: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, raw = line.partition("=")
        if not sep or "." not in name:
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str):
            config[name.strip()] = value
    return config


def _settings(config: Mapping[str, str]) -> dict[str, str]:
    """One value per setting name, the strongest section winning."""
    merged: dict[str, str] = {}
    for section in reversed(_SECTIONS):
        for dotted, value in config.items():
            found, _, name = dotted.partition(".")
            if found == section:
                merged[name] = value
    return merged


def uv_options(config: Mapping[str, str]) -> UvOptions:
    """Translate a ``pip config list`` mapping (see ``parse_pip_config_list``) into uv's options; pure."""
    args: list[str] = []
    env: dict[str, str] = {}
    ignored: list[str] = []
    settings = _settings(config)
    for name, value in sorted(settings.items()):
        values = value.split() if name in _MULTI else [value.strip()]
        values = [v for v in values if v]
        if name == "index-url" and values:
            args += ["--index-url", values[0]]
        elif name == "extra-index-url":
            for url in values:
                args += ["--extra-index-url", url]
            if values:
                args += ["--index-strategy", "unsafe-best-match"]
        elif name == "no-index":
            if value.strip().lower() in _TRUE:
                args.append("--no-index")
        elif name == "find-links":
            for link in values:
                args += ["--find-links", link]
        elif name == "trusted-host":
            for host in values:
                args += ["--allow-insecure-host", host]
        elif name == "constraint":
            for path in values:
                args += ["-c", path]
        elif name == "pre":
            if value.strip().lower() in _TRUE:
                args += ["--prerelease", "allow"]
        elif name == "cert" and values:
            env["SSL_CERT_FILE"] = values[0]
        elif name == "client-cert" and values:
            env["SSL_CLIENT_CERT"] = values[0]
        elif name in ("timeout", "default-timeout") and values:
            env["UV_HTTP_TIMEOUT"] = values[0]
        elif name == "proxy" and values:
            env["HTTPS_PROXY"] = env["HTTP_PROXY"] = values[0]
        else:
            ignored.append(name)
    return UvOptions(args=tuple(args), env=env, ignored=tuple(ignored))


def read_pip_config(python: str, *, env: Mapping[str, str] | None = None, timeout_s: float = 15.0) -> dict[str, str]:
    """Ask ``python -m pip config list`` for this machine's pip configuration (files and ``PIP_*`` variables).

    Returns ``{}`` when that interpreter has no pip, pip fails, or it does not answer within ``timeout_s``: a build
    then runs with uv's defaults, which is what a machine without pip configuration gets anyway.
    """
    try:
        done = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if done.returncode != 0:
        return {}
    return parse_pip_config_list(done.stdout)
