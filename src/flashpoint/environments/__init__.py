"""Per-endpoint environments: an endpoint's ``dependencies`` installed with uv in an isolated, cached virtual
environment that still imports flashpoint (docs/architecture.md, "Per-endpoint environments").

A service of the core (L3): imports the standard library, ``packaging``, ``uv`` (the binary's locator) and
``flashpoint.errors`` only; the plane calls ``EnvironmentCache.ensure`` in a thread and starts the worker with the
environment's ``python``.

    keys.py       normalised requirement sets and their keys (pure)
    pipconfig.py  the machine's pip configuration as uv options (pure mapping + one bounded ``pip config list``)
    build.py      one build with uv: venv, install, the inheriting ``.pth``, the runtime check
    lock.py       the per-key ``flock``
    records.py    the JSON records beside each environment
    cache.py      EnvironmentCache: find or build under the lock, list, prune
    system.py     system (Debian) dependencies: what is missing, the command that installs it
"""

from __future__ import annotations

from flashpoint.environments.cache import CacheEntry, Environment, EnvironmentCache, PruneReport, default_root
from flashpoint.environments.errors import EnvironmentBuildError, InvalidRequirementError
from flashpoint.environments.keys import PythonId, environment_key, normalize_requirement, normalize_requirements
from flashpoint.environments.pipconfig import UvOptions, parse_pip_config_list, read_pip_config, uv_options
from flashpoint.environments.records import BuildFailure, BuildProgress, EnvironmentRecord
from flashpoint.environments.system import install_command, missing_system_dependencies

__all__ = [
    "BuildFailure",
    "BuildProgress",
    "CacheEntry",
    "Environment",
    "EnvironmentBuildError",
    "EnvironmentCache",
    "EnvironmentRecord",
    "InvalidRequirementError",
    "PruneReport",
    "PythonId",
    "UvOptions",
    "default_root",
    "environment_key",
    "install_command",
    "missing_system_dependencies",
    "normalize_requirement",
    "normalize_requirements",
    "parse_pip_config_list",
    "read_pip_config",
    "uv_options",
]
