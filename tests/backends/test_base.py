"""What every backend is handed: a ``Launch``. Its environment carries the worker's credentials and the values of the
secrets its endpoint names, so it never shows in the launch's repr (a log line or a traceback that prints one)."""

from __future__ import annotations

from flashpoint.backends.base import Launch


def test_a_launch_never_shows_its_environment() -> None:
    launch = Launch("w-1", "echo", ["python", "-m", "flashpoint.worker"], {"TOKEN": "s3cret-value"}, ())

    assert "s3cret-value" not in repr(launch) and "TOKEN" not in repr(launch)
    assert "w-1" in repr(launch) and "echo" in repr(launch)
    assert launch.env == {"TOKEN": "s3cret-value"}
