"""What a function or class refers to by name: the endpoints its code may call from inside a worker (fan-out).

An embedded plane learns an endpoint's code at the endpoint's first call from the script. A queue function that
awaits another endpoint (Flash's pipeline pattern) makes that call from inside its worker, where the plane cannot be
handed code; so when the first endpoint registers, the endpoints its code names are registered with it
(``handles.Bound._connect``). ``referenced`` finds them without running anything: the global names in the code
(nested functions, lambdas and comprehensions included), closure cells, one attribute level of a module it names
(``tasks.classify``), and the helper functions and classes of the same module that the code calls in turn.
``register_named`` registers them on a connection, and the ones their code names in turn.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from flashpoint.errors import Error

if TYPE_CHECKING:
    from flashpoint.sdk.connection import Connection
    from flashpoint.spec import EndpointSpec, WorkerTarget

log = logging.getLogger("flashpoint.endpoint")


class Handle(Protocol):
    """What ``register_named`` needs of an endpoint handle (``handles.Bound``)."""

    spec: EndpointSpec
    _target_obj: Any

    def targets(self) -> dict[str, Any]: ...
    def worker_target(self) -> WorkerTarget: ...


def referenced(target: object, wanted: Callable[[object], bool]) -> list[Any]:
    """The objects ``wanted`` accepts that ``target``'s code names, in the order first named, each once."""
    found: dict[int, Any] = {}
    seen: set[int] = set()

    def visit(obj: object) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if inspect.isclass(obj):
            for member in vars(obj).values():
                visit(_function_of(member))
            return
        if not isinstance(obj, types.FunctionType):
            return
        for value in _named_values(obj):
            if wanted(value):
                found.setdefault(id(value), value)
            elif _same_module(value, obj):
                visit(value)  # a helper of the same file may be the one that makes the call

    visit(_function_of(target))
    return list(found.values())


async def register_named(conn: Connection, handle: Handle, is_handle: Callable[[object], bool]) -> None:
    """Register on ``conn`` the endpoint handles (``is_handle``) that ``handle``'s functions and classes name, and
    the ones their code names in turn: code in its worker may call them, and a worker cannot hand a plane code. One
    that cannot register is left to fail when called, with a warning now."""
    pending, done = [handle], {handle.spec.name}
    while pending:
        current = pending.pop()
        for member in current.targets().values():
            for other in referenced(member._target_obj, is_handle):
                if other.spec.name in done:
                    continue
                done.add(other.spec.name)
                pending.append(other)
                try:
                    await conn.register(other.spec, other.worker_target())
                except Error as exc:
                    log.warning(
                        "endpoint %r, which %r's code calls, is not registered: %s",
                        other.spec.name,
                        handle.spec.name,
                        exc,
                    )


def _function_of(member: object) -> object:
    """The plain function behind a method, a static or class method, a property's getter or a decorated wrapper."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    elif isinstance(member, property):
        member = member.fget
    if not isinstance(member, types.FunctionType):
        return member
    try:
        return inspect.unwrap(member)
    except ValueError:  # a __wrapped__ chain that loops: the function as it is
        return member


def _named_values(fn: types.FunctionType) -> Iterator[object]:
    """The values of the global names ``fn``'s code uses (and of ``module.name`` one level down), then its closure's."""
    names = _global_names(fn.__code__)
    for name in names:
        value = fn.__globals__.get(name)
        if value is None:
            continue
        yield value
        if isinstance(value, types.ModuleType):
            for attribute in names:  # attribute names sit in co_names beside the globals
                inner = vars(value).get(attribute)
                if inner is not None:
                    yield inner
    for cell in fn.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell (a name assigned after the function was made)
            continue


def _global_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_global_names(const))
    return list(dict.fromkeys(names))


def _same_module(value: object, fn: types.FunctionType) -> bool:
    return (inspect.isclass(value) or isinstance(value, types.FunctionType)) and getattr(
        value, "__module__", None
    ) == fn.__module__
