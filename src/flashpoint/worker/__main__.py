"""``python -m flashpoint.worker [--routes] --import MODULE:ATTR | --pickle FILE``: the process backends start.

Without ``--routes`` a queue worker (``runtime``: pulls jobs); with it a route worker (``routeserver``: serves the
endpoint's HTTP routes on ``$PORT``).
"""

from __future__ import annotations

import argparse

parser = argparse.ArgumentParser(prog="python -m flashpoint.worker", description=__doc__)
source = parser.add_mutually_exclusive_group(required=True)
source.add_argument("--import", dest="import_path", help="module:qualname or path/to/file.py:qualname")
source.add_argument("--pickle", dest="pickle_file", help="a file holding the cloudpickled function or class")
parser.add_argument(
    "--routes",
    action="store_true",
    help="serve an HTTP-route endpoint on $PORT (--import names its Endpoint, --pickle holds its routes table)",
)
arguments = parser.parse_args()
if arguments.routes:
    from flashpoint.worker.routeserver import main as serve_routes

    serve_routes(arguments.import_path, arguments.pickle_file)
else:
    from flashpoint.worker.runtime import main

    main(arguments.import_path, arguments.pickle_file)
