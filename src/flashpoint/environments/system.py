"""System dependencies: which Debian packages an endpoint names are missing here, and the command that installs them.

flashpoint never installs system packages itself (that needs root and changes the machine for everyone); it says
what is missing and the exact command to run. A name is present when dpkg says its package is installed, or when an
executable of that name is on ``PATH`` (``ffmpeg`` built from source counts, and so does a machine without dpkg).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable

from flashpoint.errors import InvalidEndpointError

__all__ = [
    "Probe",
    "dpkg_installed",
    "install_command",
    "is_present",
    "missing_system_dependencies",
    "validate_package_name",
]

#: answers "is this package present?" for one validated name
Probe = Callable[[str], bool]

#: Debian policy 5.6.7: lower case letters, digits, ``+ - .``, at least two characters, starting alphanumeric; plus an
#: optional ``:architecture`` qualifier as apt accepts it (``libc6:amd64``)
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9][a-z0-9-]*)?")
_DPKG_TIMEOUT_S = 10.0


def validate_package_name(name: str) -> str:
    """``name`` when it is a Debian package name, else ``InvalidEndpointError`` saying what one looks like.

    The check is what keeps a name from becoming anything but one argument of ``dpkg-query`` or ``apt-get`` (no
    leading ``-``, no spaces, no shell characters).
    """
    if not isinstance(name, str) or not _PACKAGE.fullmatch(name):
        raise InvalidEndpointError(
            f"system dependency {name!r} is not a Debian package name: lower-case letters, digits, '+', '-' and '.', "
            "starting with a letter or digit (e.g. 'ffmpeg', 'libsndfile1', 'libgl1')"
        )
    return name


def dpkg_installed(name: str, *, timeout_s: float = _DPKG_TIMEOUT_S) -> bool:
    """Whether dpkg reports ``name`` as ``install ok installed``; false without dpkg or when it does not answer."""
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", name],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "install ok installed"


def is_present(
    name: str,
    *,
    dpkg: Callable[[str], bool] = dpkg_installed,
    which: Callable[[str], str | None] = shutil.which,
) -> bool:
    """The default probe: installed per dpkg, or an executable of that name on ``PATH``."""
    return dpkg(name) or which(name.partition(":")[0]) is not None


def missing_system_dependencies(names: Iterable[str], *, probe: Probe = is_present) -> list[str]:
    """The names (validated, duplicates dropped, declared order kept) that ``probe`` does not find."""
    if isinstance(names, str):
        raise InvalidEndpointError(f"system_dependencies must be a list of package names: write [{names!r}]")
    seen: dict[str, None] = {}
    for name in names:
        seen.setdefault(validate_package_name(name), None)
    return [name for name in seen if not probe(name)]


def install_command(
    missing: Iterable[str],
    *,
    is_root: bool | None = None,
    has_apt: bool | None = None,
) -> str:
    """The exact command that installs ``missing`` on this machine, for a message to show the user.

    ``apt-get install -y ...``, prefixed by ``sudo `` when not running as root. On a machine without ``apt-get``, a
    sentence naming the packages instead (flashpoint knows Debian's names only). ``is_root`` and ``has_apt`` default
    to what this machine says; tests pass them.
    """
    names = [validate_package_name(name) for name in missing]
    if not names:
        return ""
    if has_apt is None:
        has_apt = shutil.which("apt-get") is not None
    if not has_apt:
        return f"no apt-get on this machine: install {', '.join(names)} (Debian package names) with its package manager"
    if is_root is None:
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    command = shlex.join(["apt-get", "install", "-y", *names])
    return command if is_root else f"sudo {command}"
