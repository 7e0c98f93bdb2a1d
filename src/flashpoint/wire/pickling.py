"""Code shipped by value to workers: cloudpickle, keeping each code object's file name.

cloudpickle 3.1 writes every code object's file name as ``"<dynamic-code>"`` (for deterministic payloads), so a
traceback raised in a worker named no file the user could open. flashpoint's pickler puts the real name back (the
line numbers were always kept): a remote traceback shows ``File "/home/me/app.py", line 10, in infer``. Payloads stay
deterministic for one file at one path. Only the file name changes; with a cloudpickle that reduces code objects
differently, this falls back to cloudpickle's own behaviour.
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any

import cloudpickle

_DYNAMIC = "<dynamic-code>"
_code_reduce = getattr(getattr(cloudpickle, "cloudpickle", None), "_code_reduce", None)


def _reduce_code(code: types.CodeType) -> Any:
    assert _code_reduce is not None
    reduced = _code_reduce(code)
    constructor, args = reduced[0], list(reduced[1])
    if args.count(_DYNAMIC) == 1:  # the file name's slot; anything else is left as cloudpickle made it
        args[args.index(_DYNAMIC)] = code.co_filename
    return (constructor, tuple(args), *reduced[2:])


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps_code(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with code objects that keep their file names."""
    if _code_reduce is None:
        return bytes(cloudpickle.dumps(obj))
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    return buffer.getvalue()
