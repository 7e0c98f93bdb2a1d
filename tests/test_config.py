"""Settings: FLASHPOINT_* variables over defaults, and a clear error for each bad value."""

from __future__ import annotations

import pytest

from flashpoint.config import Settings, env_build_timeout_s
from flashpoint.errors import ConfigError


def test_defaults() -> None:
    settings = Settings.load(env={})
    assert settings.backend == "local"
    assert settings.ray_address is None and settings.worker_url is None
    assert settings.ray_ready_timeout_s == 60.0
    assert settings.take_hold_s == 20.0
    assert settings.env_build_timeout_s == 1200.0


def test_the_environment_build_timeout() -> None:
    assert Settings.load(env={"FLASHPOINT_ENV_BUILD_TIMEOUT_S": "90.5"}).env_build_timeout_s == 90.5
    # read alone too, by an environment cache given no limit (the plane's default cache)
    assert env_build_timeout_s({"FLASHPOINT_ENV_BUILD_TIMEOUT_S": "3600"}) == 3600.0
    assert env_build_timeout_s({}) == 1200.0


def test_the_keep_warm_default() -> None:
    assert Settings.load(env={}).idle_timeout_auto is False
    assert Settings.load(env={"FLASHPOINT_IDLE_TIMEOUT": "60"}).idle_timeout_auto is False
    assert Settings.load(env={"FLASHPOINT_IDLE_TIMEOUT": " Auto "}).idle_timeout_auto is True


def test_ray_settings() -> None:
    settings = Settings.load(
        env={
            "FLASHPOINT_BACKEND": "Ray",
            "FLASHPOINT_RAY_ADDRESS": "10.0.0.5:6379",
            "FLASHPOINT_RAY_READY_TIMEOUT_S": "7.5",
            "FLASHPOINT_WORKER_URL": "http://10.0.0.5:8000/",
        }
    )
    assert settings.backend == "ray"
    assert settings.ray_address == "10.0.0.5:6379"
    assert settings.ray_ready_timeout_s == 7.5
    assert settings.worker_url == "http://10.0.0.5:8000"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("FLASHPOINT_BACKEND", "kubernetes", "FLASHPOINT_BACKEND must be one of local, ray"),
        ("FLASHPOINT_WORKER_URL", "10.0.0.5:8000", "must be an http:// URL"),
        ("FLASHPOINT_RAY_READY_TIMEOUT_S", "soon", "must be a number of seconds"),
        ("FLASHPOINT_TAKE_HOLD_S", "200", "between 0 and 90"),
        ("FLASHPOINT_ENV_BUILD_TIMEOUT_S", "twenty minutes", "must be a number of seconds, e.g. 1200"),
        ("FLASHPOINT_ENV_BUILD_TIMEOUT_S", "-5", "must not be negative"),
        ("FLASHPOINT_ENV_BUILD_TIMEOUT_S", "0", "more than 0, e.g. 1200"),
        ("FLASHPOINT_ENV_BUILD_TIMEOUT_S", "nan", "more than 0"),
        ("FLASHPOINT_IDLE_TIMEOUT", "120", "must be 'auto' \\(size keep-warm from traffic\\) or unset; got '120'"),
    ],
)
def test_bad_values_say_what_to_write(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.load(env={name: value})
