"""A call's arguments on their way to a worker: bound by the function's signature, encoded as JSON where they can be,
and a server's refusal of the rest naming the arguments it could not take."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from flashpoint.errors import BadInputError
from flashpoint.wire import codec


def encode_bound(bound: inspect.BoundArguments) -> Any:
    """Arguments as the worker passes them: by name where the signature allows (so plain calls stay JSON), else by
    position. When ``*args`` received values, every parameter before it goes by position too: by name, it would
    arrive twice (``f(6, 7, a=1)`` for ``def f(a, *rest)`` called as ``f(1, 6, 7)``)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    params = bound.signature.parameters
    positional = any(
        params[name].kind is inspect.Parameter.VAR_POSITIONAL and value for name, value in bound.arguments.items()
    )
    for param_name, value in bound.arguments.items():
        kind = params[param_name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif kind is inspect.Parameter.POSITIONAL_ONLY or (
            positional and kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            args.append(value)
        else:
            kwargs[param_name] = value
    return codec.encode_call(tuple(args), kwargs)


@contextlib.contextmanager
def naming_refused(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[None]:
    """A server that refuses pickled input (no ``--allow-pickle``) says so for the whole call; this names the
    arguments JSON could not carry (bound by ``signature``, as the call bound them), and what to do."""
    try:
        yield
    except BadInputError as exc:
        if exc.code != "pickle_not_allowed":
            raise
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:
            arguments = {f"#{i + 1}": value for i, value in enumerate(args)} | kwargs
        names = codec.unsendable((f"argument {name!r}", value) for name, value in arguments.items())
        what = ", ".join(names) or "an argument"
        raise BadInputError(
            f"{what} cannot travel as JSON, and the server refuses pickled input: pass JSON values (dict, list, str, "
            "numbers, bool, None), or start the server with --allow-pickle if every caller is trusted "
            f"({exc})",
            code="pickle_not_allowed",
        ) from None
