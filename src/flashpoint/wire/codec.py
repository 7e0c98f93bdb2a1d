"""How call arguments and outputs travel: plain JSON when JSON can carry them, else a documented binary encoding.

A job's input is a JSON object of keyword arguments (``{"data": {...}}`` for ``infer(data)``). Values JSON cannot
carry exactly (tuples, bytes, numpy arrays, objects, non-string keys, NaN) travel instead as::

    {"__flashpoint_pickle__": "<base64 of cloudpickle.dumps({"args": [...], "kwargs": {...}})>"}

An HTTP server refuses that input unless it runs with ``--allow-pickle`` (unpickling runs code).

Outputs are never marked in band, since an output may hold anything a caller sent. A worker whose job accepts
binary output (the SDK's jobs say ``binary_ok``) and whose value is not JSON sends the base64 of the pickle as the
output and says so beside it, out of band: ``{"output": "<base64>", "outputEncoding": "cloudpickle-base64"}``. The
control plane keeps that mark only for a job that accepted it, and callers decode an output only when the job's
record carries the mark: a JSON output that looks like an envelope is just data.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from flashpoint.jobs import BINARY_ENCODING, ENCODING_KEY

PICKLE_KEY = "__flashpoint_pickle__"
#: positional arguments that JSON carries, beside the keyword ones: ``{"b": 2, "__flashpoint_args__": [1]}``
ARGS_KEY = "__flashpoint_args__"


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
    """Keyword arguments as a JSON object when possible (positional ones, when JSON too, under ``ARGS_KEY`` beside
    them: ``f(*values)``, a positional-only parameter), else the binary envelope (which carries both)."""
    if is_json(kwargs) and ARGS_KEY not in kwargs:
        if not args:
            return dict(kwargs)
        if is_json(list(args)):
            return {**kwargs, ARGS_KEY: list(args)}
    return {PICKLE_KEY: _dumps({"args": list(args), "kwargs": kwargs})}


def unsendable(named: Iterable[tuple[str, Any]]) -> list[str]:
    """The names of the values JSON cannot carry (``"argument 'data' (ndarray)"``), for a refusal to name them."""
    return [f"{name} ({type(value).__name__})" for name, value in named if not is_json(value)]


def decode_call(payload: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The inverse of encode_call; a plain JSON object becomes keyword arguments."""
    if isinstance(payload, dict) and PICKLE_KEY in payload:
        data = _loads(payload[PICKLE_KEY])
        return tuple(data["args"]), dict(data["kwargs"])
    if not isinstance(payload, dict):
        raise TypeError(
            f'job input must be a JSON object of keyword arguments, e.g. {{"data": ...}}; got {type(payload).__name__}'
        )
    if ARGS_KEY in payload:
        kwargs = dict(payload)
        args = kwargs.pop(ARGS_KEY)
        if not isinstance(args, list):
            raise TypeError(f"{ARGS_KEY} holds a job's positional arguments as a JSON list; got {type(args).__name__}")
        return tuple(args), kwargs
    return (), dict(payload)


def encode_output(value: Any, *, binary_ok: bool) -> dict[str, Any]:
    """An output as the fields of a result body: ``{"output": value}`` when JSON can carry it, else the base64 pickle
    with its encoding beside it when the caller accepts that. Raises TypeError otherwise."""
    if is_json(value):
        return {"output": value}
    if binary_ok:
        return {"output": _dumps(value), ENCODING_KEY: BINARY_ENCODING}
    raise TypeError(
        f"the output ({type(value).__name__}) cannot be carried as JSON; return dicts, lists, strings, numbers, "
        "booleans or None (or call the endpoint through the flashpoint SDK, which accepts any picklable value)"
    )


def is_binary(fields: Any) -> bool:
    """True when a result body (or a stream chunk) says its output is a base64 pickle."""
    return isinstance(fields, dict) and fields.get(ENCODING_KEY) == BINARY_ENCODING


def decode_output(value: Any, *, binary: bool) -> Any:
    """An output as the caller gets it: unpickled only when the job's record marks it binary (out of band)."""
    if binary and isinstance(value, str):
        return _loads(value)
    return value


def decode_chunk(chunk: Any) -> Any:
    """One streamed chunk, ``{"output": value}`` with an optional encoding beside it, as the caller gets it."""
    if not isinstance(chunk, dict):
        return chunk
    return decode_output(chunk.get("output"), binary=is_binary(chunk))


def json_bytes(value: Any) -> bytes:
    """UTF-8 JSON of ``value``. Lone UTF-16 surrogates (valid in JSON text, not in UTF-8) are kept as ``\\ud800``
    escapes, so every text a caller or a handler produced survives the trip."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


#: the largest result (or batch of results) a worker may post by default: ``serve --max-result-mb``
MAX_RESULT_BYTES = 32 * 1024 * 1024

#: the deepest nesting of arrays and objects a request body may have
MAX_JSON_DEPTH = 128


class JSONTooDeepError(ValueError):
    """A JSON text nested deeper than MAX_JSON_DEPTH."""


def loads_bounded(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for untrusted bytes: strict JSON in UTF-8, nested at most ``max_depth`` deep (ValueError
    otherwise). ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) are not JSON, though Python's
    parser takes them: they are refused too, so every accepted value can be written back as JSON.

    Parsing deep nesting costs recursion (Python stops near 1,000 levels with RecursionError) and so does every later
    encoding of the value; the limit keeps both far away. Counting brackets and looking for long exponents is
    C-speed; the walks over the parsed value run only when those say they could find something.
    """
    text = raw.decode("utf-8")
    deep = raw.count(b"[") + raw.count(b"{") > max_depth
    try:
        value = json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise JSONTooDeepError(f"JSON nested deeper than {max_depth} levels") from None
    if deep and _any_node(value, lambda item, depth: depth > max_depth and isinstance(item, (dict, list))):
        raise JSONTooDeepError(f"JSON nested deeper than {max_depth} levels")
    if _LONG_EXPONENT.search(raw) and _any_node(
        value, lambda item, depth: isinstance(item, float) and math.isinf(item)
    ):
        raise ValueError("a number is too large for a 64-bit float (JSON numbers must be finite)")
    return value


#: an exponent of three or more digits: the only way a JSON number can overflow a float
_LONG_EXPONENT = re.compile(rb"[eE][+-]?[0-9]{3,}")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (numbers must be finite)")


def _any_node(value: Any, test: Callable[[Any, int], bool]) -> bool:
    """Whether ``test(node, depth)`` holds for any node of a parsed JSON value (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if test(item, depth):
            return True
        if isinstance(item, (dict, list)):
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False
