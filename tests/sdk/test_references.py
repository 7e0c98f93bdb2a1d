"""``references.referenced``: the objects a function's or class's code names, found without running it (a table)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import pytest

from flashpoint import Endpoint
from flashpoint.errors import InvalidEndpointError
from flashpoint.sdk.endpoint import EndpointFunction
from flashpoint.sdk.references import referenced, register_named
from flashpoint.spec import EndpointSpec, WorkerTarget


class Marker:
    """What the tests look for (an endpoint handle, in ``endpoint._register_called``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Marker({self.name})"


A, B, C, D = Marker("a"), Marker("b"), Marker("c"), Marker("d")
tools = types.ModuleType("tools")
tools.D = D  # type: ignore[attr-defined]


def uses_a() -> Any:
    return A


def uses_a_and_b() -> Any:
    return (B, A, B)


def in_a_lambda() -> Any:
    return lambda: A


def in_a_comprehension() -> Any:
    return [A for _ in range(2)]


def in_a_nested_def() -> Any:
    def inner() -> Any:
        return B

    return inner


def through_a_helper() -> Any:
    return uses_a()


def through_a_module() -> Any:
    return tools.D


def recursive() -> Any:
    return recursive() if A else None


def names_none() -> int:
    return len("A")  # a string and a builtin: nothing is named


def shadowed(A: Any) -> Any:  # a parameter of the same name is not the global
    return A


def closure_over(value: Any) -> Callable[[], Any]:
    def inner() -> Any:
        return value

    return inner


def decorated(fn: Callable[[], Any]) -> Callable[[], Any]:
    @functools.wraps(fn)
    def wrapper() -> Any:
        return fn()

    return wrapper


@decorated
def wrapped() -> Any:
    return C


class Model:
    def method(self) -> Any:
        return A

    @staticmethod
    def static() -> Any:
        return B

    @classmethod
    def klass(cls) -> Any:
        return through_a_module()

    @property
    def prop(self) -> Any:
        return C


def uses_len() -> Any:
    return len  # a builtin from another module is not followed


CASES: list[tuple[str, Any, list[Marker]]] = [
    ("a global", uses_a, [A]),
    ("each once, in the order named", uses_a_and_b, [B, A]),
    ("in a lambda", in_a_lambda, [A]),
    ("in a comprehension", in_a_comprehension, [A]),
    ("in a nested def", in_a_nested_def, [B]),
    ("through a helper of the same module", through_a_helper, [A]),
    ("one attribute level into a module", through_a_module, [D]),
    ("recursion ends", recursive, [A]),
    ("nothing named", names_none, []),
    ("a parameter of the same name is not the global", shadowed, []),
    ("a closure cell", closure_over(B), [B]),
    ("through functools.wraps", wrapped, [C]),
    ("a class's methods, static, class methods and properties", Model, [A, B, D, C]),
    ("a builtin is not followed", uses_len, []),
]


@pytest.mark.parametrize(("target", "expected"), [(t, e) for _, t, e in CASES], ids=[c[0] for c in CASES])
def test_referenced(target: Any, expected: list[Marker]) -> None:
    assert referenced(target, lambda value: isinstance(value, Marker)) == expected


def test_a_wrapped_chain_that_loops_is_read_as_it_is() -> None:
    def looped() -> Any:
        return A

    looped.__wrapped__ = looped  # type: ignore[attr-defined]
    assert referenced(looped, lambda value: isinstance(value, Marker)) == [A]


def test_a_function_of_another_module_is_not_followed() -> None:
    other = types.ModuleType("other")
    exec("def far():\n    return A\n", other.__dict__)  # a module of the test's own
    other.A = A  # type: ignore[attr-defined]
    globals()["FAR"] = other.far
    try:
        assert referenced(other.far, lambda value: isinstance(value, Marker)) == [A]
        assert referenced(calls_far, lambda value: isinstance(value, Marker)) == []
    finally:
        del globals()["FAR"]


def calls_far() -> Any:
    return FAR()  # type: ignore[name-defined]  # noqa: F821 - set by the test above


# register_named: real Endpoint handles, and a connection that records what it is asked to register


@Endpoint(name="ref-leaf", cpu="cpu3c-1-2")
async def leaf(x: int) -> int:
    return x


@Endpoint(name="ref-broken", cpu="cpu3c-1-2")
async def broken(x: int) -> int:
    return x


@Endpoint(name="ref-middle", cpu="cpu3c-1-2")
async def middle(x: int) -> int:
    return await leaf(x) + await broken(x)


@Endpoint(name="ref-top", cpu="cpu3c-1-2")
async def top(x: int) -> int:
    return await middle(x) + await leaf(x) + await top(x - 1) if x else 0


class Recording:
    """The part of a Connection ``register_named`` uses: it records each registration, refusing ``refuse``."""

    def __init__(self, refuse: str) -> None:
        self.refuse = refuse
        self.registered: list[str] = []

    async def register(self, spec: EndpointSpec, target: WorkerTarget) -> None:
        self.registered.append(spec.name)
        if spec.name == self.refuse:
            raise InvalidEndpointError("already registered with other options")


async def test_register_named_registers_what_the_code_names_transitively_each_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn = Recording(refuse="ref-broken")
    await register_named(conn, top, lambda value: isinstance(value, EndpointFunction))  # type: ignore[arg-type]
    # top names middle and leaf (and itself, skipped); middle names leaf (once already) and broken
    assert conn.registered == ["ref-middle", "ref-leaf", "ref-broken"]
    # the one that failed is said, and the others were registered all the same
    assert "'ref-broken', which 'ref-top''s code calls, is not registered" in caplog.text
