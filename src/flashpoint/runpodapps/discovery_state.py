"""State shared by discovery scans and the handles' guard against calls at import time (mirrors
``runpod/apps/discovery_state.py`` of ``runpod==2.0.0rc2``).

While ``RUNPOD_DISCOVERY_SCAN`` is set (a scan importing a project's files to find its Apps), calling a handle raises
``DiscoveryInvocationError`` instead of running anything.

Standard library and ``flashpoint.errors`` only.
"""

from __future__ import annotations

import os

from flashpoint.errors import Error

__all__ = ["DISCOVERY_ENV", "DiscoveryInvocationError", "in_discovery"]

DISCOVERY_ENV = "RUNPOD_DISCOVERY_SCAN"


def in_discovery() -> bool:
    return bool(os.environ.get(DISCOVERY_ENV))


class DiscoveryInvocationError(Error):
    """a handle was invoked at module level during a discovery scan."""

    code = "invoked_during_discovery"

    def __init__(self, resource_name: str) -> None:
        super().__init__(
            f"'{resource_name}' was invoked at import time. move calls "
            f"into a function, an entrypoint, or an "
            f'`if __name__ == "__main__":` guard so importing the file '
            f"has no side effects."
        )
