"""``python -m flashpoint.worker --import MODULE:ATTR | --pickle FILE``: the process backends start."""

from __future__ import annotations

import argparse

from flashpoint.worker.runtime import main

parser = argparse.ArgumentParser(prog="python -m flashpoint.worker", description=__doc__)
source = parser.add_mutually_exclusive_group(required=True)
source.add_argument("--import", dest="import_path", help="module:qualname or path/to/file.py:qualname")
source.add_argument("--pickle", dest="pickle_file", help="a file holding the cloudpickled function or class")
arguments = parser.parse_args()
main(arguments.import_path, arguments.pickle_file)
