"""Call shapes: how an endpoint is called (its function's parameters, or each method's), as plain data, and the
intake's input checks built from them.

A server checks a job's input against the function's parameters before it queues the job. ``serve`` and ``dev``
hold the user's code and take the shape from it (``shape_of``); a deployed project is loaded in another process
(``hosting.loader``), which sends the shapes back as plain data (``CallShape.to_data``), so the server checks input
without ever holding the code. Both go through ``checkers``: one implementation of the check and its messages.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flashpoint.errors import BadInputError, ConfigError
from flashpoint.sdk.endpoint import EndpointClass, EndpointCommand, EndpointFunction
from flashpoint.wire import codec

__all__ = ["KINDS", "CallShape", "Param", "call_shape", "checkers", "shape_of"]

#: one parameter: (name, kind as ``inspect.Parameter``'s kind name, e.g. "POSITIONAL_OR_KEYWORD", has a default)
Param = tuple[str, str, bool]

#: the parameter kinds, by name
KINDS: Mapping[str, Any] = {
    kind.name: kind
    for kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.VAR_KEYWORD,
    )
}

#: how long a signature's text may be in a shape (a default's repr may be anything); longer text is cut
MAX_TEXT = 2000


class _Default:
    """The default of every parameter that has one, in a signature rebuilt from a shape: binding needs to know
    there is one, never its value."""

    def __repr__(self) -> str:
        return "..."


_DEFAULT = _Default()


@dataclass(frozen=True, slots=True)
class CallShape:
    """How one function (or class) of an endpoint is called: its parameters and the text of its signature, as the
    intake's messages show it (``(x: int, y: str = 'a')``); for a class, each public method's own shape (its
    parameters less ``self``), in declaration order."""

    params: tuple[Param, ...] = ()
    text: str = "()"
    #: a class endpoint's methods, ``(method, shape)`` in declaration order; None for a function
    methods: tuple[tuple[str, CallShape], ...] | None = None

    def signature(self) -> inspect.Signature:
        """The signature to bind a call to: the parameters, each default a stand-in.

        Raises:
            ValueError: the parameters are no signature (a name that is not an identifier, kinds out of order).
        """
        return inspect.Signature(
            [
                inspect.Parameter(name, KINDS[kind], default=_DEFAULT if has_default else inspect.Parameter.empty)
                for name, kind, has_default in self.params
            ]
        )

    def to_data(self) -> dict[str, Any]:
        """The shape as plain data (dicts, lists, tuples, strings, booleans) for a pickle or JSON."""
        data: dict[str, Any] = {"params": [list(p) for p in self.params], "text": self.text}
        if self.methods is not None:
            data["methods"] = [[name, shape.to_data()] for name, shape in self.methods]
        return data

    @classmethod
    def from_data(cls, data: Any) -> CallShape:
        """The shape ``to_data`` wrote, checked: every part of the right type, and the parameters a signature.

        Raises:
            ConfigError: ``data`` is no call shape.
        """
        return _shape_from(data, nested=False)


def _shape_from(data: Any, *, nested: bool) -> CallShape:
    if not isinstance(data, dict) or not isinstance(data.get("text"), str) or not isinstance(data.get("params"), list):
        raise ConfigError(f"a call shape must be a dict with 'params' and 'text', got {type(data).__name__}")
    params: list[Param] = []
    for param in data["params"]:
        if not (isinstance(param, list | tuple) and len(param) == 3):
            raise ConfigError(f"a call shape's parameter must be (name, kind, has_default), got {param!r:.200}")
        name, kind, has_default = param
        if not isinstance(name, str) or kind not in KINDS or not isinstance(has_default, bool):
            raise ConfigError(f"a call shape's parameter must be (name, kind, has_default), got {param!r:.200}")
        params.append((name, kind, has_default))
    methods: tuple[tuple[str, CallShape], ...] | None = None
    if data.get("methods") is not None:
        listed = data["methods"]
        if nested or not isinstance(listed, list) or not listed:
            raise ConfigError("a call shape's methods must be a non-empty list of (method, shape), one level deep")
        found = []
        for entry in listed:
            if not (isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[0], str)):
                raise ConfigError(f"a call shape's method must be (name, shape), got {entry!r:.200}")
            found.append((entry[0], _shape_from(entry[1], nested=True)))
        methods = tuple(found)
    shape = CallShape(tuple(params), data["text"][:MAX_TEXT], methods)
    try:
        shape.signature()
    except ValueError as exc:
        raise ConfigError(f"a call shape's parameters are no signature: {exc}") from None
    return shape


def _text(signature: inspect.Signature) -> str:
    text = str(signature)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 4] + "...)"


def _of_signature(signature: inspect.Signature) -> CallShape:
    params = tuple(
        (p.name, p.kind.name, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()
    )
    return CallShape(params, _text(signature))


def _less_self(signature: inspect.Signature) -> inspect.Signature:
    """A method's signature as its instance is called: its first parameter (``self``) bound, when it takes one
    positionally (a ``def m(*args)`` takes ``self`` in ``args`` and keeps them all)."""
    params = list(signature.parameters.values())
    if params and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return signature.replace(parameters=params)


def call_shape(member: Any) -> CallShape:
    """The call shape of the one function or class a handle (``EndpointFunction``, ``EndpointClass``) decorates,
    not of the others sharing its name."""
    if isinstance(member, EndpointClass):
        cls = member.__wrapped__
        methods = tuple(
            (method, _of_signature(_less_self(inspect.signature(getattr(cls, method)))))
            for method in member.spec.methods
        )
        return CallShape(methods=methods)
    return _of_signature(inspect.signature(member.__wrapped__))


def shape_of(handle: Any) -> dict[str, CallShape]:
    """The call shape of each function and class a handle's endpoint serves (``handle.targets()``), by target name;
    ``{}`` for a worker command (it takes any input, as on Runpod) or an HTTP-route endpoint (it takes no jobs)."""
    if isinstance(handle, EndpointCommand) or not isinstance(handle, EndpointFunction | EndpointClass):
        return {}
    return {target: call_shape(member) for target, member in handle.targets().items()}


def _checker(name: str, shape: CallShape) -> Callable[[Any], None]:
    """Checks that a job's input fits the function's parameters (or the named method's), before it is stored."""

    def fail(message: str) -> BadInputError:
        return BadInputError(f"endpoint {name!r}: {message}", code="bad_input")

    def bind(signature: inspect.Signature, text: str, payload: Any) -> None:
        if not isinstance(payload, dict):
            raise fail(f"input must be a JSON object of keyword arguments for {name}{text}, e.g. "
                       f'{{"input": {{"data": ...}}}}; got {type(payload).__name__}')  # fmt: skip
        try:
            args, kwargs = codec.decode_call(payload) if codec.ARGS_KEY in payload else ((), payload)
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise fail(f"input does not fit {name}{text}: {exc}") from None

    if shape.methods is not None:
        signatures = {method: (m.signature(), m.text) for method, m in shape.methods}
        methods = [method for method, _ in shape.methods]

        def check_method(payload: Any) -> None:
            params = dict(payload) if isinstance(payload, dict) else payload
            method = params.pop("method", None) if isinstance(params, dict) else None
            if method is None and len(methods) > 1:
                raise fail(f'name a method in "method" ({", ".join(methods)}), e.g. {{"method": "{methods[0]}", ...}}')
            method = method or methods[0]
            if not isinstance(method, str) or method not in signatures:
                raise fail(f"unknown method {method!r}; methods: {', '.join(methods)}")
            bind(*signatures[method], params)

        return check_method
    signature = shape.signature()
    return lambda payload: bind(signature, shape.text, payload)


def _needs_target(name: str, targets: list[str]) -> Callable[[Any], None]:
    def check(payload: Any) -> None:
        raise BadInputError(
            f"endpoint {name!r} serves several functions or classes ({', '.join(targets)}); name the one to call "
            f'beside the input: {{"input": {{...}}, "flashpoint": {{"target": "{targets[0]}"}}}}',
            code="bad_input",
        )

    return check


def checkers(
    key: str, shapes_by_target: Mapping[str, CallShape] | None, kind: str, *, name: str | None = None
) -> dict[str, Callable[[Any], None]]:
    """The intake's checkers for one endpoint: ``key`` for a job naming no target, ``key/target`` for one naming its
    target (the functions and classes sharing one endpoint name).

    Args:
        key: how the intake knows the endpoint (its name, or its id when deployed).
        shapes_by_target: ``shape_of``'s answer, or the shapes a loader sent; None or empty for a worker command,
            whose handler takes any JSON input, as on Runpod.
        kind: "queue", or "route" for an HTTP-route endpoint, which takes no jobs (its requests go through the
            route proxy) and so gets no checker.
        name: the endpoint's name in messages (``endpoint 'embed': input does not fit embed(x)``); ``key`` if not
            given.

    Returns:
        ``{key: check, f"{key}/{target}": check, ...}``; each check raises ``BadInputError`` (code ``bad_input``)
        for input that does not fit. A key serving several targets refuses a job naming none.
    """
    if kind == "route" or not shapes_by_target:
        return {}
    shown = key if name is None else name
    found: dict[str, Callable[[Any], None]] = {}
    for target, shape in shapes_by_target.items():
        found[f"{key}/{target}"] = _checker(shown, shape)
    if len(shapes_by_target) == 1:
        found[key] = _checker(shown, next(iter(shapes_by_target.values())))
    else:
        found[key] = _needs_target(shown, list(shapes_by_target))
    return found
