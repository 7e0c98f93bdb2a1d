"""``flashpoint run SCRIPT.py [ARGS...]``: run a script as ``python SCRIPT.py ARGS`` would, with ``runpod_flash``
resolving to flashpoint, so an unmodified Runpod Flash script runs its endpoints here.

Edge module: may import anything in flashpoint, plus typer.
"""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from flashpoint import flashalias
from flashpoint.errors import ConfigError

#: the command's click settings: every word after SCRIPT is the script's (``flashpoint run app.py --help`` hands
#: ``--help`` to app.py), while ``flashpoint run --help`` still shows this command's help
CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True}


def run(
    script: Annotated[Path, typer.Argument(help="The Python file to run as __main__.", show_default=False)],
    args: Annotated[
        list[str] | None, typer.Argument(help="Arguments for the script (its sys.argv[1:]).", show_default=False)
    ] = None,
) -> None:
    """Run SCRIPT as `python SCRIPT ARGS` would, with `runpod_flash` resolving to flashpoint.

    An unmodified Runpod Flash script (`from runpod_flash import Endpoint, ...`, then `await fn(...)`) runs its
    endpoints on flashpoint: on the embedded server (this machine's GPUs, or FLASHPOINT_SIMULATED_GPUS), or on the
    server at FLASHPOINT_URL when that is set. Workers resolve `runpod_flash` the same way. runpod-flash need not be
    installed; where it is, the script gets flashpoint instead.
    """
    path = script.expanduser()
    if not path.is_file():
        raise ConfigError(f"no such file: {str(path)!r}; name the script to run, e.g. flashpoint run main.py")
    # as `python SCRIPT` does: the script's folder first on sys.path (its sibling modules import), and its argv
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *(args or [])]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with flashalias.installed():
            runpy.run_path(str(path), run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        # what `python SCRIPT` prints: the traceback from the script's own frames on, then exit status 1
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != str(path):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
        raise typer.Exit(1) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
