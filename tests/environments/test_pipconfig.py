"""pip's configuration as uv's options (flashpoint/environments/pipconfig.py): a table of the mapping, then pip."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from flashpoint.environments import UvOptions, parse_pip_config_list, read_pip_config, uv_options

BEST_MATCH = ("--index-strategy", "unsafe-best-match")


@pytest.mark.parametrize(
    ("config", "args", "env"),
    [
        ({}, (), {}),
        ({"global.index-url": "https://mirror/simple"}, ("--index-url", "https://mirror/simple"), {}),
        (
            {"global.extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple"},
            ("--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple")
            + BEST_MATCH,
            {},
        ),
        (
            {"global.extra-index-url": "\nhttps://a/simple\n  https://b/simple\n"},
            ("--extra-index-url", "https://a/simple", "--extra-index-url", "https://b/simple") + BEST_MATCH,
            {},
        ),
        ({"global.find-links": "/opt/wheels"}, ("--find-links", "/opt/wheels"), {}),
        (
            {"global.find-links": "/opt/wheels https://host/links"},
            ("--find-links", "/opt/wheels", "--find-links", "https://host/links"),
            {},
        ),
        (
            {"global.trusted-host": "a.example b.example"},
            ("--allow-insecure-host", "a.example", "--allow-insecure-host", "b.example"),
            {},
        ),
        ({"global.constraint": "/etc/xdg/pip/constraints.txt"}, ("-c", "/etc/xdg/pip/constraints.txt"), {}),
        ({"global.no-index": "true"}, ("--no-index",), {}),
        ({"global.no-index": "false"}, (), {}),
        ({"install.pre": "1"}, ("--prerelease", "allow"), {}),
        ({"global.cert": "/etc/ssl/ca.pem"}, (), {"SSL_CERT_FILE": "/etc/ssl/ca.pem"}),
        ({"global.client-cert": "/etc/ssl/me.pem"}, (), {"SSL_CLIENT_CERT": "/etc/ssl/me.pem"}),
        ({":env:.default-timeout": "180"}, (), {"UV_HTTP_TIMEOUT": "180"}),
        ({"global.timeout": "30"}, (), {"UV_HTTP_TIMEOUT": "30"}),
        (
            {"global.proxy": "http://proxy:3128"},
            (),
            {"HTTPS_PROXY": "http://proxy:3128", "HTTP_PROXY": "http://proxy:3128"},
        ),
        # precedence: PIP_* (":env:") over [install] over [global], whole values (pip replaces, it does not merge)
        (
            {"global.index-url": "https://g/simple", "install.index-url": "https://i/simple"},
            ("--index-url", "https://i/simple"),
            {},
        ),
        (
            {"global.find-links": "/g", "install.find-links": "/i", ":env:.find-links": "/e"},
            ("--find-links", "/e"),
            {},
        ),
        (
            {":env:.cert": "/env.pem", "global.cert": "/global.pem"},
            (),
            {"SSL_CERT_FILE": "/env.pem"},
        ),
        # sections pip install does not read are not ours either
        ({"freeze.index-url": "https://f/simple", "download.find-links": "/d"}, (), {}),
    ],
)
def test_mapping(config: dict[str, str], args: tuple[str, ...], env: dict[str, str]) -> None:
    options = uv_options(config)
    assert options.args == args
    assert dict(options.env) == env
    assert options.ignored == ()


def test_settings_without_a_counterpart_are_listed_as_ignored() -> None:
    options = uv_options({":env:.disable-pip-version-check": "1", "global.no-cache-dir": "true", "global.user": "1"})
    assert options == UvOptions(ignored=("disable-pip-version-check", "no-cache-dir", "user"))


def test_this_machines_configuration_maps_every_setting_it_has() -> None:
    # the set-up this project's machines have (see the brief of issue 13): all of it honoured
    config = {
        ":env:.cert": "/etc/ssl/certs/ca-certificates.crt",
        ":env:.default-timeout": "180",
        ":env:.find-links": "/opt/wheels",
        "global.cert": "/etc/ssl/certs/ca-certificates.crt",
        "global.constraint": "/etc/xdg/pip/constraints.txt",
        "global.extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "global.find-links": "/opt/wheels",
    }
    options = uv_options(config)
    assert options.args == (
        "-c",
        "/etc/xdg/pip/constraints.txt",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        *BEST_MATCH,
        "--find-links",
        "/opt/wheels",
    )
    assert dict(options.env) == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}


def test_parsing_pip_config_list_output() -> None:
    text = (
        ":env:.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
        'global.index-url="https://it\'s/simple"\n'
        "not a setting\n"
        "global.broken='unterminated\n"
    )
    assert parse_pip_config_list(text) == {
        ":env:.cert": "/etc/ssl/certs/ca-certificates.crt",
        "global.extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "global.index-url": "https://it's/simple",
    }


def test_reading_pip_itself(tmp_path: Path) -> None:
    # Given a pip configuration file of our own and a PIP_* variable (the OS environment is the only thing set up)
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = https://a/simple https://b/simple\n[install]\nconstraint = /c.txt\n")
    env = {**os.environ, "PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "/wheels"}
    # When pip is asked
    config = read_pip_config(sys.executable, env=env)
    # Then the file's settings and the variable are there, and map as pip would apply them
    assert config["global.extra-index-url"] == "https://a/simple https://b/simple"
    assert config["install.constraint"] == "/c.txt"
    assert config[":env:.find-links"] == "/wheels"
    args = uv_options(config).args
    assert args[:2] == ("-c", "/c.txt") and ("--find-links", "/wheels") == args[-2:]


def test_no_pip_means_no_configuration(tmp_path: Path) -> None:
    assert read_pip_config(str(tmp_path / "no-such-python")) == {}
    assert read_pip_config(sys.executable, env={**os.environ, "PYTHONPATH": ""}, timeout_s=0.001) == {}
