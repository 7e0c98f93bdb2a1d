"""Discovery: load the endpoints that an app file or module declares (``app.py``, ``pkg.mod``, either ``:attr``).

Core module: imports only the domain layer (never the CLI, the HTTP stack or the scheduler).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TypeAlias

from flashpoint.errors import ConfigError
from flashpoint.flash import alias
from flashpoint.runpodapps.bridge import endpoint_for
from flashpoint.runpodapps.handles import ApiHandle, FunctionHandle
from flashpoint.runpodapps.serving import ApiEndpoint
from flashpoint.sdk.endpoint import Endpoint, EndpointClass, EndpointCommand, EndpointFunction
from flashpoint.sdk.routes import is_route_endpoint

__all__ = ["AnyEndpoint", "load_endpoints", "load_module", "module_name", "split_target"]

#: what ``@Endpoint`` returns (a function or class handle), a worker command, or an ``Endpoint`` with HTTP routes
AnyEndpoint: TypeAlias = (
    "EndpointFunction[..., Any] | EndpointClass[..., Any] | EndpointCommand | Endpoint | ApiEndpoint"
)
_KINDS = (EndpointFunction, EndpointClass, EndpointCommand)


def _is_endpoint(value: Any) -> bool:
    """A handle, or an ``Endpoint`` that declares routes (one that declares none, or a client, is no endpoint)."""
    return isinstance(value, _KINDS) or is_route_endpoint(value) or isinstance(value, ApiEndpoint)


def _served(value: Any) -> Any:
    """What serves a module-level value: a Runpod SDK 2.x resource's flashpoint handle (``runpodapps.bridge``, made
    once per resource, so every module that holds it finds the same one), else the value itself."""
    if isinstance(value, FunctionHandle | ApiHandle):
        served = vars(value).get(_SERVED)
        if served is None:
            try:
                served = endpoint_for(value)
            except Exception as exc:  # rc2's errors and flashpoint's: the declaration cannot be served
                raise ConfigError(f"{value!r} cannot be served: {type(exc).__name__}: {exc}") from exc
            vars(value)[_SERVED] = served
        return served
    return value


#: where an rc2 handle keeps the flashpoint handle that serves it
_SERVED = "_flashpoint_served"


_FORMS = "path/to/app.py, package.module, or either with :attr naming one endpoint (app.py:infer)"


def split_target(target: str) -> tuple[str, str | None]:
    """Split ``"app.py:infer"`` into ``("app.py", "infer")``; ``"app.py"`` gives ``("app.py", None)``.

    A colon followed by a path (a Windows drive, ``C:\\apps\\app.py``) is not an attribute separator.
    """
    source, colon, attr = target.rpartition(":")
    if colon and source and attr and not any(sep in attr for sep in ("/", "\\")):
        return source, attr
    return target, None


def _is_path(source: str) -> bool:
    return source.endswith(".py") or "/" in source or os.sep in source or Path(source).is_dir()


def module_name(path: Path) -> tuple[Path, str]:
    """The import root and dotted name of a file: packages (folders with ``__init__.py``) are walked up."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def _missing_file(path: Path) -> ConfigError:
    hint = ""
    if path.parent.is_dir():
        near = difflib.get_close_matches(path.name, [p.name for p in path.parent.glob("*.py")], n=3)
        if near:
            hint = f"; did you mean {' or '.join(repr(str(path.parent / n)) for n in near)}?"
    return ConfigError(f"no such file: {str(path)!r}{hint}")


def _import_failed(what: str, exc: BaseException) -> ConfigError:
    return ConfigError(f"importing {what} failed: {type(exc).__name__}: {exc}")


def _load_file(source: str) -> ModuleType:
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "__init__.py").is_file():
            raise ConfigError(f"{source!r} is a folder without __init__.py; name the .py file that declares endpoints")
        path = path / "__init__.py"
    if not path.is_file():
        raise _missing_file(path)
    path = path.resolve()
    if path.suffix != ".py":
        raise ConfigError(f"{source!r} is not a Python file (.py); accepted: {_FORMS}")
    root, name = module_name(path)
    bad = [part for part in name.split(".") if not part.isidentifier()]
    if bad:
        # Workers import the endpoint's module by name, so the name must be importable.
        raise ConfigError(
            f"{str(path)!r} cannot be imported as a module: {bad[0]!r} is not a Python identifier; "
            f"rename it, e.g. to {bad[0].replace('-', '_').replace(' ', '_')!r}"
        )
    loaded = sys.modules.get(name)
    if loaded is not None:
        if _same_file(loaded, path):
            return loaded
        raise ConfigError(
            f"cannot load {str(path)!r} as module {name!r}: that name is already taken by "
            f"{getattr(loaded, '__file__', None) or 'a built-in module'}; rename the file"
        )
    added = str(root) not in sys.path
    if added:
        # The file's folder goes on sys.path so that the module has a stable, importable name: cloudpickle pickles
        # its functions by reference and worker subprocesses (which inherit sys.path) import it by that name.
        sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()  # the file may have been written after its folder's listing was cached
        try:
            spec = importlib.util.find_spec(name)  # imports the parent packages of a dotted name
            if spec is None or spec.origin is None or Path(spec.origin).resolve() != path:
                found = spec.origin if spec is not None and spec.origin else "a built-in module"
                raise ConfigError(
                    f"cannot load {str(path)!r} as module {name!r}: {found} has that name; rename the file"
                )
            module = importlib.import_module(name)
        except ConfigError:
            raise
        except Exception as exc:
            raise _import_failed(str(path), exc) from exc
        except SystemExit as exc:  # a module that calls sys.exit() at import time
            raise _import_failed(str(path), exc) from exc
    except ConfigError:
        if added and str(root) in sys.path:
            sys.path.remove(str(root))
        raise
    return module


def _same_file(module: ModuleType, path: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve() == path


def _load_dotted(name: str) -> ModuleType:
    if not all(part.isidentifier() for part in name.split(".")):
        raise ConfigError(f"{name!r} is neither a .py file nor a module name; accepted: {_FORMS}")
    # `flashpoint ...` runs as a console script whose sys.path lacks the working directory; add it, as arq,
    # dramatiq and uvicorn do, so `flashpoint explain --app app` finds ./app.py.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ConfigError(
                f"no module named {exc.name!r} (searched the working directory and sys.path); accepted: {_FORMS}"
            ) from exc
        raise _import_failed(f"module {name!r}", exc) from exc
    except Exception as exc:
        raise _import_failed(f"module {name!r}", exc) from exc
    except SystemExit as exc:
        raise _import_failed(f"module {name!r}", exc) from exc


def load_module(source: str) -> ModuleType:
    """Import ``path/to/app.py`` or ``package.module`` and return the module (registered in ``sys.modules``).

    A file is imported under a stable name: its stem, or its dotted name inside a package, with the import root
    put on ``sys.path``. Loading the same file twice returns the module already loaded. While it imports,
    ``runpod_flash`` is flashpoint (``flashalias``), also where runpod-flash is installed: a Flash app runs as it is.

    Raises:
        ConfigError: a missing file, a name that cannot be imported, or an import that failed (with its error).
    """
    with alias.installed():
        return _load_file(source) if _is_path(source) else _load_dotted(source)


def _endpoints_of(module: ModuleType) -> dict[str, AnyEndpoint]:
    found: dict[str, AnyEndpoint] = {}
    for attr, value in vars(module).items():
        value = _served(value)
        if not _is_endpoint(value):
            continue
        # keyed by the endpoint's id: two Runpod SDK 2.x apps' resources of one name are two endpoints
        existing = found.get(value.spec.key)
        if existing is not None and existing is not value:
            # functions and classes declared with one name and the same options are one endpoint serving them all
            shared = getattr(existing, "shared", None)
            if shared is not None and shared is getattr(value, "shared", None):
                continue
            if is_route_endpoint(existing) or is_route_endpoint(value):
                raise ConfigError(
                    f"{module.__name__}: two endpoints are named {value.spec.name!r} (the second is {attr!r}) and one "
                    "serves HTTP routes: an endpoint is either a queue endpoint or a set of routes; give each its "
                    "own name="
                )
            raise ConfigError(
                f"{module.__name__}: two endpoints are named {value.spec.name!r} with different options (the "
                f"second is {attr!r}); declare every function of one endpoint with the same options, or give each "
                "endpoint its own name="
            )
        found[value.spec.key] = value
    return found


def _attr_names(module: ModuleType) -> dict[str, AnyEndpoint]:
    return {attr: _served(value) for attr, value in vars(module).items() if _is_endpoint(_served(value))}


def _select(module: ModuleType, source: str, attr: str) -> dict[str, AnyEndpoint]:
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            break
        obj = getattr(obj, part)
    else:
        obj = _served(obj)
        if _is_endpoint(obj):
            return {obj.spec.key: obj}
        raise ConfigError(
            f"{source}:{attr} is a {type(obj).__name__}, not an endpoint; decorate it with "
            f"@Endpoint(name=..., gpu=...) or name one of: {', '.join(_attr_names(module)) or 'none'}"
        )
    by_name = _endpoints_of(module)
    if attr in by_name:  # the endpoint's name= rather than its attribute name
        return {attr: by_name[attr]}
    known = sorted(set(_attr_names(module)) | set(by_name))
    close = difflib.get_close_matches(attr, known, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(f"{source} has no endpoint {attr!r}{hint} (endpoints: {', '.join(known) or 'none'})")


def load_endpoints(target: str) -> dict[str, AnyEndpoint]:
    """The endpoints that ``target`` declares, keyed by endpoint name, in definition order.

    Args:
        target: ``path/to/app.py``, ``package.module``, or either followed by ``:attr`` naming one endpoint (by its
            attribute or by its ``name=``). Every ``@Endpoint`` object found at module level counts, also ones the
            module imported from elsewhere.

    Returns:
        ``{endpoint name: EndpointFunction | EndpointClass | EndpointCommand | Endpoint}`` (an ``Endpoint`` with
        HTTP routes: its ``spec`` lists them, ``worker_target()`` says how its workers load them); exactly one entry
        when ``:attr`` is given.

    Raises:
        ConfigError: a missing file or module, an import that failed (the original error is included and chained),
            no endpoint in the module, two endpoints with one name, or an unknown ``attr`` (with close matches).

    Example:
        >>> load_endpoints("examples/quickstart.py:hello")  # doctest: +SKIP
        {'hello': <Endpoint 'hello' gpu=...>}
    """
    if not target or not target.strip():
        raise ConfigError(f"no app given; accepted: {_FORMS}")
    source, attr = split_target(target.strip())
    module = load_module(source)
    if attr is not None:
        return _select(module, source, attr)
    found = _endpoints_of(module)
    if not found:
        raise ConfigError(
            f"{source} declares no endpoint: decorate a function or class at module level with "
            "@Endpoint(name=..., gpu=...) (from flashpoint import Endpoint), or declare a Runpod SDK 2.x resource "
            "(app = runpod.App('my-app'), then @app.queue(...), @app.api(...) or @app.task(...))"
        )
    return found
