"""Ray's token for the one-node Ray flashpoint starts, kept where only this user can read it.

Ray 2.59+ turns token authentication on for a new local Ray (``ray.init()`` with no address) and, when no token
exists yet, writes one to ``~/.ray/auth_token`` with the process's umask: 0644 in a 0755 ``~/.ray`` on most machines.
Any local user could then read it and run code in this user's Ray (its GCS listens on loopback), which is what the
token is for. So before flashpoint starts its local Ray, ``keep_private`` writes the token itself, 0600 in a 0700
``~/.ray`` when it makes that folder, exactly where and as Ray would (64 hex characters), or makes an existing one of
this user's 0600 (with a warning: ``private.private_file``). Nothing imports Ray here.

Not touched: a token given in ``RAY_AUTH_TOKEN`` (the user's environment), a cluster of someone else's address (its
token is the user's to manage), and ``RAY_AUTH_MODE=disabled`` (no token at all: Ray warns about that itself).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from flashpoint.private import private_dir, private_file

__all__ = ["keep_private", "token_file"]

#: Ray's token for a new local cluster, under the user's home (Ray's ``_get_default_token_path``)
DEFAULT_TOKEN = Path(".ray") / "auth_token"


def token_file(env: Mapping[str, str], home: Path) -> tuple[Path, bool] | None:
    """The file Ray reads its token from for a new local Ray, and whether Ray would make it when missing; None when
    no file is involved (token mode off, or the token given in ``RAY_AUTH_TOKEN``). Pure."""
    if env.get("RAY_AUTH_MODE", "").strip().lower() == "disabled" or env.get("RAY_AUTH_TOKEN", "").strip():
        return None
    named = env.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if named:  # the user's own file: Ray reads it and never makes it
        return Path(named).expanduser(), False
    return home / DEFAULT_TOKEN, True


def keep_private(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path | None:
    """Before a new local Ray starts: make its token file private, writing the token first when Ray would make it.
    Returns the file (None: no file involved). Errors are left to Ray, which then says what is wrong."""
    found = token_file(os.environ if env is None else env, Path.home() if home is None else home)
    if found is None:
        return None
    path, made_by_ray = found
    try:
        if os.path.lexists(path):
            private_file(path)  # an existing one of this user's that others may read becomes 0600, said once
        elif made_by_ray:
            if not path.parent.is_dir():
                private_dir(path.parent, ours=False)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32))  # as Ray's own generator: 256 bits as hex
    except FileExistsError:  # another process wrote it meanwhile: make sure of its mode
        private_file(path)
    except OSError:
        return None  # Ray tries the same and reports what is wrong in its own words
    return path
