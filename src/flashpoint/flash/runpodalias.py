"""``runpod`` resolving to Runpod SDK 2.x's App surface, flashpoint's, while flashpoint loads or runs user code
(decision 0108): an unmodified ``from runpod import App, GpuGroup`` file runs on flashpoint whether ``runpod`` is not
installed, is 1.x, or is 2.x.

The stand-in is a package module named ``runpod``:

- the App surface (``App``, ``Api``, ``Queue``, ``Job``, ``Model``, ``Secret``, the volumes, ``DataCenter``,
  ``GpuGroup``, ``GpuType``, ``CpuInstanceType``, the markers, ``local_entrypoint``, ``schedule``, ``is_local``,
  ``current_context``, the errors) is ``flashpoint.runpodapps``'s, and ``runpod.apps`` is that package itself;
- its ``__path__`` is the installed ``runpod``'s folder, so ``import runpod.serverless`` (an unmodified Runpod
  handler), ``runpod.endpoint`` and every other submodule load from the real package, never from flashpoint;
- any other top-level name (``runpod.api_key``, ``runpod.Endpoint``, ``create_pod``...) comes from the real package's
  ``__init__``, run on first use only (rc2's runs its worker fitness checks; 1.x's imports its whole client);
- without an installed ``runpod``, a submodule import says to install it.

``install()`` is called by ``flash.alias.install()``, so the places that lend ``runpod_flash`` lend ``runpod`` too, and
``installed()``'s exit puts back what was there before (a real ``runpod`` included). Core module: standard library at
import time; the App surface is imported when the stand-in is built (the seam up to ``runpodapps``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["MODULE", "SURFACE", "VERSION", "install", "stand_in"]

#: the name the stand-in answers to
MODULE = "runpod"
#: what ``runpod.__version__`` says: the surface is rc2's, provided by flashpoint
VERSION = "2.0.0rc2+flashpoint"
#: the top-level names ``runpod/__init__.py`` of 2.0.0rc2 resolves from ``runpod.apps`` (its ``_LAZY_ATTRS``)
SURFACE: tuple[str, ...] = (
    "Api",
    "App",
    "DataCenter",
    "EndpointNotFound",
    "GlobalVolume",
    "Job",
    "Model",
    "NetworkVolume",
    "Queue",
    "Secret",
    "Volume",
    "is_local",
    "local_entrypoint",
    "schedule",
    "CpuInstanceType",
    "GpuGroup",
    "GpuType",
    "delete",
    "get",
    "init",
    "patch",
    "post",
    "put",
)
#: names of ``runpod.apps.__all__`` a script may also reach from the top level (``runpod.current_context``...)
_ALSO = ("AppError", "RemoteExecutionError", "ScheduleNotSupported", "current_context")
#: the package flashpoint provides in place of ``runpod.apps``
_APPS = "runpod.apps"


def _is_runpod(name: str) -> bool:
    return name == MODULE or name.startswith(MODULE + ".")


def _real_spec() -> ModuleSpec | None:
    """The installed ``runpod`` package's spec, found by the other finders (never by ours)."""
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec: ModuleSpec | None = find(MODULE, None)
        except Exception:  # a finder of someone else's that fails: as if it found nothing
            continue
        if spec is not None and spec.submodule_search_locations:
            return spec
    return None


class _RealInit:
    """The installed package's ``__init__``, run once, on first use, into a module of its own (never ``sys.modules``'s
    ``runpod``): where the stand-in lacks a name, the real package has it."""

    def __init__(self, spec: ModuleSpec | None) -> None:
        self.spec = spec
        self.module: ModuleType | None = None

    def get(self, name: str) -> Any:
        if self.spec is None or self.spec.loader is None:
            raise AttributeError(
                f"module 'runpod' has no attribute {name!r}: flashpoint provides Runpod SDK 2.x's App API here "
                "(App, GpuGroup, ...), and the rest of the runpod package is not installed: pip install runpod"
            )
        if self.module is None:
            module = importlib.util.module_from_spec(self.spec)
            # the real __init__'s relative imports (from .version import ...) resolve through sys.modules' runpod,
            # the stand-in, whose __path__ is this package's folder: the same submodules
            self.spec.loader.exec_module(module)
            self.module = module
        return getattr(self.module, name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on ``sys.meta_path`` while installed: ``runpod`` is the stand-in and ``runpod.apps`` flashpoint's
    package; other ``runpod.*`` names load from the installed package's folder, or are refused with the reason."""

    def __init__(self, module: ModuleType, apps: ModuleType, real: ModuleSpec | None) -> None:
        self.module = module
        self.apps = apps
        self.real = real

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> ModuleSpec | None:
        if fullname == MODULE:
            return ModuleSpec(MODULE, self, origin="flashpoint", is_package=True)
        if fullname == _APPS:
            return ModuleSpec(_APPS, self, origin="flashpoint", is_package=True)
        if _is_runpod(fullname) and self.real is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: flashpoint provides Runpod SDK 2.x's App API as `runpod` "
                "(App, GpuGroup, ...); the rest of the runpod package (runpod.serverless for a worker's handler, "
                "...) is not installed here: pip install runpod",
                name=fullname,
            )
        return None  # runpod.serverless...: the path finder finds it in the stand-in's __path__, the real folder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.apps if spec.name == _APPS else self.module

    def exec_module(self, module: ModuleType) -> None:
        pass  # built once, in stand_in()


def stand_in() -> tuple[ModuleType, ModuleType, ModuleSpec | None]:
    """A fresh ``runpod`` stand-in, the App package it lends, and the installed package's spec (None: none)."""
    import flashpoint.runpodapps as apps

    real = _real_spec()
    init = _RealInit(real)
    module = ModuleType(MODULE, "Runpod SDK 2.x's App API, provided by flashpoint (flashpoint.flash.runpodalias).")
    names = {name: getattr(apps, name) for name in (*SURFACE, *_ALSO)}

    def missing(name: str) -> Any:
        value = init.get(name)
        setattr(module, name, value)
        return value

    vars(module).update(names)
    vars(module).update(
        __all__=list(SURFACE),
        __version__=VERSION,
        __getattr__=missing,
        apps=apps,
        __path__=list(real.submodule_search_locations or []) if real is not None else [],
        __spec__=ModuleSpec(MODULE, None, origin="flashpoint", is_package=True),
    )
    return module, apps, real


def install() -> Callable[[], None]:
    """Make ``runpod`` the stand-in now; returns the function that puts back what was there before (the real package
    and its submodules included). Installs nest."""
    module, apps, real = stand_in()
    saved = {name: sys.modules[name] for name in list(sys.modules) if _is_runpod(name)}
    for name in saved:
        del sys.modules[name]
    sys.modules[MODULE] = module
    sys.modules[_APPS] = apps
    finder = _Finder(module, apps, real)
    sys.meta_path.insert(0, finder)

    def restore() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name in [name for name in sys.modules if _is_runpod(name)]:
            del sys.modules[name]
        sys.modules.update(saved)

    return restore
