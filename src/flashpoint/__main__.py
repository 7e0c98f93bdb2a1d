"""``python -m flashpoint``: the command line, as the ``flashpoint`` script runs it."""

from __future__ import annotations

from flashpoint.cli import main

main()
