"""Per-endpoint environments: an endpoint's ``dependencies`` installed with uv in an isolated, cached virtual
environment that still imports flashpoint (docs/architecture.md, "Per-endpoint environments").

A service of the core (L3): imports the standard library, ``packaging``, ``uv`` (the binary's locator),
``flashpoint.errors`` and ``flashpoint.config`` (the build time limit) only; the plane calls ``EnvironmentCache.ensure``
in a thread and starts the worker with the environment's ``python``.

    keys.py       normalised requirement sets and their keys (pure)
    pipconfig.py  the machine's pip configuration as uv options (pure mapping + one bounded ``pip config list``)
    build.py      one build with uv: venv, install, the inheriting ``.pth``, the runtime check
    interrupt.py  stopping a build from another thread (the plane closing, the time limit): kills the installer
    lock.py       the per-key ``flock``, and the in-use hold prune respects
    records.py    the JSON records beside each environment
    cache.py      EnvironmentCache: find or build under the lock, list, prune
    system.py     system (Debian) dependencies: what is missing, the command that installs it
"""

from __future__ import annotations

from flashpoint.environments.cache import CacheEntry, Environment, EnvironmentCache, PruneReport, default_root
from flashpoint.environments.errors import BuildInterrupted, EnvironmentBuildError, InvalidRequirementError
from flashpoint.environments.interrupt import Interrupt
from flashpoint.environments.keys import PythonId, environment_key, normalize_requirement, normalize_requirements
from flashpoint.environments.pipconfig import UvOptions, parse_pip_config_list, read_pip_config, uv_options
from flashpoint.environments.records import BuildFailure, BuildProgress, EnvironmentRecord
from flashpoint.environments.system import install_command, missing_system_dependencies

__all__ = [
    "BuildFailure",
    "BuildInterrupted",
    "BuildProgress",
    "CacheEntry",
    "Environment",
    "EnvironmentBuildError",
    "EnvironmentCache",
    "EnvironmentRecord",
    "Interrupt",
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
