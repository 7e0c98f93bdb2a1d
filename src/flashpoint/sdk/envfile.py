"""A project's ``.env`` file, loaded when flashpoint is imported, as Runpod Flash loads it.

Flash runs ``load_dotenv(find_dotenv(usecwd=True))`` at import: the first ``.env`` found walking up from the working
directory, never overriding a variable that is already set. Scripts that keep ``HF_TOKEN`` and the like there get
them here too. ``FLASHPOINT_DOTENV=0`` turns it off. python-dotenv is imported only when a file is found.
"""

from __future__ import annotations

import os
from pathlib import Path

#: set to "0" to skip loading a .env file
SWITCH = "FLASHPOINT_DOTENV"


def find(start: Path) -> Path | None:
    """The first ``.env`` file in ``start`` or one of its parents."""
    for folder in (start, *start.parents):
        candidate = folder / ".env"
        if candidate.is_file():
            return candidate
    return None


def load(start: Path | None = None) -> Path | None:
    """Load the ``.env`` found from ``start`` (the working directory) into ``os.environ``, never overriding a
    variable already set; returns its path, or None when there is none (or loading is switched off)."""
    if os.environ.get(SWITCH, "1").strip() == "0":
        return None
    try:
        here = Path.cwd() if start is None else start
    except OSError:  # the working directory was removed
        return None
    path = find(here)
    if path is not None:
        from dotenv import load_dotenv

        load_dotenv(path, override=False)
    return path
