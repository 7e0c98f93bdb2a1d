"""How call arguments and outputs travel: plain JSON when JSON can carry them, else a documented binary envelope.

A job's input is a JSON object of keyword arguments (``{"data": {...}}`` for ``infer(data)``). Values JSON cannot
carry exactly (tuples, bytes, numpy arrays, objects, non-string keys, NaN) travel instead as::

    {"__flashpoint_pickle__": "<base64 of cloudpickle.dumps({"args": [...], "kwargs": {...}})>"}

Outputs use the same envelope with the pickled value, and only for callers that said they accept it (the SDK);
HTTP callers get JSON or a clear error. Pickles are only ever read from the control plane you started or were
given a key for: never unpickle data from a party you do not trust.
"""

from __future__ import annotations

import base64
import math
from typing import Any

PICKLE_KEY = "__flashpoint_pickle__"


def is_json(value: Any) -> bool:
    """True if ``json.loads(json.dumps(value)) == value`` with the same types (no tuples, NaN, non-str keys)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if type(value) is list:
        return all(is_json(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and is_json(item) for key, item in value.items())
    return False


def _dumps(value: Any) -> str:
    import cloudpickle  # imported on first use: most calls never need it

    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


def _loads(text: str) -> Any:
    import pickle

    return pickle.loads(base64.b64decode(text))


def encode_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments as a JSON object when possible, else the binary envelope (which also carries ``args``)."""
    if not args and is_json(kwargs):
        return dict(kwargs)
    return {PICKLE_KEY: _dumps({"args": list(args), "kwargs": kwargs})}


def decode_call(payload: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The inverse of encode_call; a plain JSON object becomes keyword arguments."""
    if isinstance(payload, dict) and PICKLE_KEY in payload:
        data = _loads(payload[PICKLE_KEY])
        return tuple(data["args"]), dict(data["kwargs"])
    if not isinstance(payload, dict):
        raise TypeError(
            f'job input must be a JSON object of keyword arguments, e.g. {{"data": ...}}; got {type(payload).__name__}'
        )
    return (), dict(payload)


def encode_value(value: Any, *, binary_ok: bool) -> Any:
    """An output as JSON, or as the envelope when the caller accepts it. Raises TypeError otherwise."""
    if is_json(value):
        return value
    if binary_ok:
        return {PICKLE_KEY: _dumps(value)}
    raise TypeError(
        f"the output ({type(value).__name__}) cannot be carried as JSON; return dicts, lists, strings, numbers, "
        "booleans or None (or call the endpoint through the flashpoint SDK, which accepts any picklable value)"
    )


def decode_value(value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1 and PICKLE_KEY in value:
        return _loads(value[PICKLE_KEY])
    return value
