"""``runpod_flash`` resolving to flashpoint: an unmodified Runpod Flash app (``from runpod_flash import Endpoint``)
runs on flashpoint whether or not runpod-flash is installed.

The alias is a module named ``runpod_flash`` holding the names of ``runpod_flash.__all__`` (runpod-flash 1.21) that
flashpoint provides, the very objects ``flashpoint`` exports. It is installed only where flashpoint itself loads
code, and only while it does (``installed()`` restores what was there before, a real runpod_flash included):
discovery (``flashpoint serve``, ``explain --app``), the worker loading its endpoint's code (import or unpickle), and
``flashpoint run SCRIPT`` for the script's whole run. ``import flashpoint`` never installs it: a program that
imports both keeps its own runpod_flash.

Only the top-level module stands in: ``import runpod_flash.core...`` (Flash's internals) raises
``ModuleNotFoundError`` saying so, rather than load half of a real runpod-flash beside the alias.

Core module: standard library only at import time; flashpoint's SDK surface is imported when the alias is built.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["FLASH_NAMES", "MODULE", "alias_module", "install", "installed"]

#: the name the alias answers to
MODULE = "runpod_flash"

#: ``runpod_flash.__all__`` of runpod-flash 1.21.0, in its order (tests/e2e/test_flash_client.py compares)
FLASH_NAMES: tuple[str, ...] = (
    "Endpoint",
    "EndpointJob",
    "remote",
    "CPU_DATACENTERS",
    "CpuInstanceType",
    "CpuLiveLoadBalancer",
    "CpuLiveServerless",
    "CpuLoadBalancerSlsResource",
    "CpuServerlessEndpoint",
    "CudaVersion",
    "DataCenter",
    "GpuGroup",
    "GpuType",
    "LiveLoadBalancer",
    "LiveServerless",
    "LoadBalancerSlsResource",
    "NetworkVolume",
    "PodTemplate",
    "ResourceManager",
    "ServerlessEndpoint",
    "ServerlessScalerType",
    "ServerlessType",
    "FlashApp",
    "DEFAULT_WORKERS_MIN",
    "DEFAULT_WORKERS_MAX",
)

_module: ModuleType | None = None


def _is_flash(name: str) -> bool:
    return name == MODULE or name.startswith(MODULE + ".")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on ``sys.meta_path`` while installed: ``runpod_flash`` is the alias (also after someone dropped it from
    ``sys.modules``), ``runpod_flash.<anything>`` is refused with the reason."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> ModuleSpec | None:
        if fullname == MODULE:
            return ModuleSpec(MODULE, self, origin="flashpoint")
        if _is_flash(fullname):
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: flashpoint stands in for runpod_flash and provides its public names "
                "only; import them from the package itself (from runpod_flash import Endpoint, GpuGroup, ...)",
                name=fullname,
            )
        return None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        pass  # built once, in alias_module()


def _missing(name: str) -> Any:
    if name in FLASH_NAMES:
        raise AttributeError(
            f"runpod_flash.{name} is a Runpod Flash name flashpoint does not provide yet (flashpoint stands in for "
            "runpod_flash here)"
        )
    raise AttributeError(f"module {MODULE!r} has no attribute {name!r} (flashpoint stands in for runpod_flash here)")


def alias_module() -> ModuleType:
    """The ``runpod_flash`` stand-in (one per process): Flash's public names that flashpoint has, as flashpoint's
    objects; ``__version__`` is flashpoint's, so a script that prints it learns what really runs it."""
    global _module
    if _module is None:
        import flashpoint

        module = ModuleType(MODULE, "Runpod Flash's public names, provided by flashpoint (flashpoint.flash.alias).")
        provided = [name for name in FLASH_NAMES if hasattr(flashpoint, name)]
        vars(module).update({name: getattr(flashpoint, name) for name in provided})
        vars(module).update(
            __all__=provided,
            __version__=flashpoint.__version__,
            __getattr__=_missing,
            # a package without a folder: `import runpod_flash.x` asks the finders (ours refuses it with the
            # reason) instead of failing with "'runpod_flash' is not a package"
            __path__=[],
            __spec__=ModuleSpec(MODULE, None, origin="flashpoint", is_package=True),
        )
        _module = module
    return _module


def install() -> Callable[[], None]:
    """Make ``runpod_flash`` resolve to the alias now; returns the function that puts back what was there before.

    Modules named ``runpod_flash`` or ``runpod_flash.*`` already imported (a real runpod-flash) are set aside and
    restored by the returned function, so code imported meanwhile gets flashpoint and code imported before keeps
    its own. ``runpod`` becomes Runpod SDK 2.x's App surface the same way (``runpodalias``). Installs nest.
    """
    from flashpoint.flash import runpodalias

    module = alias_module()
    restore_runpod = runpodalias.install()  # Flash's successor, Runpod SDK 2.x's `runpod.App`, in the same places
    saved = {name: sys.modules[name] for name in list(sys.modules) if _is_flash(name)}
    for name in saved:
        del sys.modules[name]
    sys.modules[MODULE] = module
    finder = _Finder(module)
    sys.meta_path.insert(0, finder)

    def restore() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name in [name for name in sys.modules if _is_flash(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
        restore_runpod()

    return restore


@contextmanager
def installed() -> Iterator[ModuleType]:
    """``runpod_flash`` is flashpoint inside the ``with`` block, and what it was before afterwards.

    Example:
        >>> with installed():  # doctest: +SKIP
        ...     module = load_module("app.py")  # app.py: from runpod_flash import Endpoint, GpuGroup
    """
    restore = install()
    try:
        yield alias_module()
    finally:
        restore()
