"""Tests for flashpoint.wire.codec: what JSON can carry exactly, and the binary envelope for the rest."""

from __future__ import annotations

import base64
import json
import math
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import pytest

from flashpoint.jobs import ENCODING_KEY
from flashpoint.wire import codec
from flashpoint.wire.codec import (
    ARGS_KEY,
    PICKLE_KEY,
    decode_call,
    decode_output,
    encode_call,
    encode_output,
    is_json,
    unsendable,
)


@dataclass(frozen=True)
class Point:
    x: int
    y: int


JSON_VALUES = {
    "none": None,
    "str": "héllo",
    "empty-str": "",
    "true": True,
    "false": False,
    "int": 42,
    "big-int": 2**80,
    "negative": -7,
    "float": 2.5,
    "zero-float": 0.0,
    "list": [1, "a", None],
    "empty-list": [],
    "dict": {"a": 1},
    "empty-dict": {},
    "nested": {"a": [{"b": [1, 2, {"c": None}]}], "d": {"e": "f"}},
}

NOT_JSON_VALUES = {
    "tuple": (1, 2),
    "empty-tuple": (),
    "nan": float("nan"),
    "inf": float("inf"),
    "minus-inf": float("-inf"),
    "int-key": {1: "a"},
    "tuple-key": {(1, 2): "a"},
    "none-key": {None: 1},
    "bytes": b"abc",
    "set": {1, 2},
    "object": Point(1, 2),
    "nested-tuple": {"a": [1, (2,)]},
    "nested-nan": [{"a": float("nan")}],
    "nested-inf-key": {"a": {2: float("inf")}},
    "ordered-dict": OrderedDict(a=1),
    "list-subclass": type("L", (list,), {})([1]),
    "str-subclass-key": {type("K", (str,), {})("k"): 1},
}


@pytest.mark.parametrize("value", JSON_VALUES.values(), ids=JSON_VALUES.keys())
def test_is_json_true_when_json_round_trips_exactly(value: Any) -> None:
    assert is_json(value) is True
    # the definition: a JSON round trip gives an equal value of the same types
    assert json.loads(json.dumps(value)) == value


@pytest.mark.parametrize("value", NOT_JSON_VALUES.values(), ids=NOT_JSON_VALUES.keys())
def test_is_json_false_when_json_would_change_the_value(value: Any) -> None:
    assert is_json(value) is False


# --- calls -------------------------------------------------------------------------------------------------------


def test_json_keyword_arguments_stay_plain_json() -> None:
    kwargs = {"data": {"prompt": "a red fox", "steps": 20, "guidance": 7.5, "seed": None}}

    payload = encode_call((), kwargs)

    assert payload == kwargs
    assert payload is not kwargs  # a copy: later changes to the caller's dict do not reach the job
    assert json.loads(json.dumps(payload)) == kwargs
    assert decode_call(payload) == ((), kwargs)


def test_no_arguments_is_an_empty_object() -> None:
    assert encode_call((), {}) == {}
    assert decode_call({}) == ((), {})


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1, (2, 3)), {}),
        ((), {"data": (1, 2)}),
        ((), {"blob": b"\x00\x01"}),
        (("pos",), {"k": b"v"}),
        ((), {"point": Point(3, 4)}),
        ((), {"m": {1: {2: 3}}}),
        (([1, (2, 3)],), {"f": float("inf")}),
    ],
    ids=["positional", "tuple", "bytes", "mixed", "object", "int-keys", "inf"],
)
def test_non_json_call_round_trips_through_the_envelope(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    payload = encode_call(args, kwargs)

    assert list(payload) == [PICKLE_KEY]
    json.dumps(payload)  # the envelope itself is JSON: it travels in a job's input
    decoded_args, decoded_kwargs = decode_call(payload)
    assert decoded_args == args
    assert type(decoded_args) is tuple
    assert decoded_kwargs == kwargs
    assert repr(decoded_kwargs) == repr(kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "payload"),
    [
        ((1, 2), {}, {ARGS_KEY: [1, 2]}),
        (("pos",), {"k": "v"}, {"k": "v", ARGS_KEY: ["pos"]}),
        (([1, {"a": None}],), {}, {ARGS_KEY: [[1, {"a": None}]]}),
    ],
    ids=["positional", "mixed", "nested"],
)
def test_json_positional_arguments_travel_as_json_beside_the_keywords(
    args: tuple[Any, ...], kwargs: dict[str, Any], payload: dict[str, Any]
) -> None:
    assert encode_call(args, kwargs) == payload
    assert decode_call(payload) == (args, kwargs)


def test_a_keyword_named_like_the_positional_key_goes_in_the_envelope() -> None:
    assert list(encode_call((1,), {ARGS_KEY: 2})) == [PICKLE_KEY]
    with pytest.raises(TypeError, match="JSON list"):
        decode_call({ARGS_KEY: "not a list"})


def test_unsendable_names_what_json_cannot_carry() -> None:
    named = [("argument 'a'", 1), ("argument 'b'", {1, 2}), ("argument 'c'", b"x"), ("argument 'd'", [1])]
    assert unsendable(named) == ["argument 'b' (set)", "argument 'c' (bytes)"]


def test_envelope_keeps_nan() -> None:
    _, kwargs = decode_call(encode_call((), {"x": float("nan")}))
    assert math.isnan(kwargs["x"])


def test_envelope_carries_locally_defined_functions() -> None:
    # cloudpickle, not pickle: a lambda or a local function survives the trip
    offset = 10
    args, _ = decode_call(encode_call((lambda v: v + offset,), {}))
    assert args[0](1) == 11


@pytest.mark.parametrize("payload", [[1, 2], "text", 3, None], ids=["list", "str", "int", "none"])
def test_decode_call_rejects_a_non_object_input_with_an_example(payload: Any) -> None:
    with pytest.raises(TypeError) as info:
        decode_call(payload)
    message = str(info.value)
    assert "job input must be a JSON object of keyword arguments" in message
    assert '{"data": ...}' in message
    assert type(payload).__name__ in message


def test_decode_call_returns_a_copy_of_plain_input() -> None:
    payload = {"data": 1}
    _, kwargs = decode_call(payload)
    kwargs["data"] = 2
    assert payload == {"data": 1}


# --- values (outputs) -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", JSON_VALUES.values(), ids=JSON_VALUES.keys())
@pytest.mark.parametrize("binary_ok", [True, False])
def test_json_output_is_sent_as_is(value: Any, binary_ok: bool) -> None:
    encoded = encode_output(value, binary_ok=binary_ok)
    assert encoded == {"output": value}
    assert not codec.is_binary(encoded)
    assert decode_output(encoded["output"], binary=False) == value


@pytest.mark.parametrize(
    "value",
    [(1, 2), b"bytes", {1: "a"}, Point(1, 2), {"nested": [(1,), {2: b"x"}]}, {1, 2}],
    ids=["tuple", "bytes", "int-key", "object", "nested", "set"],
)
def test_non_json_output_round_trips_for_binary_callers_marked_out_of_band(value: Any) -> None:
    encoded = encode_output(value, binary_ok=True)

    assert set(encoded) == {"output", ENCODING_KEY}
    assert encoded[ENCODING_KEY] == "cloudpickle-base64"
    assert isinstance(encoded["output"], str)
    json.dumps(encoded)
    assert codec.is_binary(encoded)
    decoded = decode_output(encoded["output"], binary=True)
    assert decoded == value
    assert type(decoded) is type(value)
    assert repr(decoded) == repr(value)
    assert codec.decode_chunk(encoded) == value


@pytest.mark.parametrize(
    "value", [(1, 2), b"bytes", float("nan"), Point(1, 2)], ids=["tuple", "bytes", "nan", "object"]
)
def test_non_json_output_for_json_callers_raises_with_advice(value: Any) -> None:
    with pytest.raises(TypeError) as info:
        encode_output(value, binary_ok=False)

    message = str(info.value)
    assert f"the output ({type(value).__name__}) cannot be carried as JSON" in message
    assert "return dicts, lists, strings, numbers, booleans or None" in message
    assert "flashpoint SDK" in message


class _Bomb:
    """Unpickling this runs code: it appends to a list (the test's witness)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (HITS.append, ("unpickled",))


HITS: list[str] = []


@pytest.mark.parametrize(
    "value",
    [
        {PICKLE_KEY: "only-key"},
        {"data": {PICKLE_KEY: "nested"}},
        {PICKLE_KEY: "not-the-only-key", "other": 1},
        {"__flashpoint_pickle": "close but different"},
    ],
    ids=["only-key", "nested", "extra-key", "near-miss"],
)
def test_an_output_that_looks_like_an_envelope_is_just_data(value: Any) -> None:
    assert decode_output(value, binary=False) == value
    assert codec.decode_chunk({"output": value}) == value


def test_data_shaped_like_the_old_in_band_envelope_never_runs_code() -> None:
    bomb = base64.b64encode(pickle.dumps(_Bomb())).decode()
    HITS.clear()
    assert decode_output({PICKLE_KEY: bomb}, binary=False) == {PICKLE_KEY: bomb}
    assert codec.decode_chunk({"output": {PICKLE_KEY: bomb}}) == {PICKLE_KEY: bomb}
    # a chunk's encoding only counts beside a string output: a caller's dict output is never unpickled
    assert codec.decode_chunk({"output": {PICKLE_KEY: bomb}, ENCODING_KEY: "cloudpickle-base64"}) == {PICKLE_KEY: bomb}
    assert HITS == []


@pytest.mark.parametrize(
    "value",
    ["\ud800", {"k\udfff": ["x\ud83d"]}, "plain é ✓", ["😀 astral"]],
    ids=["lone-high", "lone-low-in-key", "plain", "astral"],
)
def test_json_bytes_keeps_lone_surrogates_as_escapes(value: Any) -> None:
    encoded = codec.json_bytes(value)
    assert json.loads(encoded) == value
    encoded.decode("utf-8")  # always valid UTF-8


def test_json_bytes_writes_utf8_when_it_can() -> None:
    assert codec.json_bytes({"s": "é"}) == '{"s": "é"}'.encode()


@pytest.mark.parametrize("depth", [1, 50, 128])
def test_loads_bounded_takes_nesting_up_to_the_limit(depth: int) -> None:
    raw = ("[" * depth + "]" * depth).encode()
    assert codec.loads_bounded(raw) is not None


@pytest.mark.parametrize("depth", [129, 1_000, 100_000])
def test_loads_bounded_refuses_deeper_nesting_with_a_value_error(depth: int) -> None:
    raw = ('{"a":' * depth + "1" + "}" * depth).encode()
    with pytest.raises(codec.JSONTooDeepError, match="nested deeper than 128 levels"):
        codec.loads_bounded(raw)


def test_loads_bounded_takes_scalars_inside_the_deepest_container() -> None:
    raw = ('{"a":' * 128 + "1" + "}" * 128).encode()
    assert codec.loads_bounded(raw) is not None


@pytest.mark.parametrize(
    "raw",
    [b'{"x": NaN}', b'{"x": Infinity}', b'{"x": -Infinity}', b'{"x": 1e999999}', b"[-1E400]", b'{"x": 10e+308}'],
)
def test_loads_bounded_refuses_numbers_json_does_not_have(raw: bytes) -> None:
    with pytest.raises(ValueError, match="finite"):
        codec.loads_bounded(raw)


@pytest.mark.parametrize("raw", [b'{"x": 1e100}', b'{"x": 1.5E-300}', b'{"x": "1e999 in a string"}'])
def test_loads_bounded_takes_finite_numbers_with_long_exponents(raw: bytes) -> None:
    assert codec.loads_bounded(raw) == json.loads(raw)


def test_loads_bounded_refuses_integers_with_too_many_digits() -> None:
    with pytest.raises(ValueError):
        codec.loads_bounded(b'{"x": ' + b"9" * 10_000 + b"}")


def test_loads_bounded_counts_brackets_in_strings_without_refusing_them() -> None:
    raw = json.dumps({"s": "[" * 10_000}).encode()
    assert codec.loads_bounded(raw) == {"s": "[" * 10_000}


def test_loads_bounded_refuses_invalid_utf8() -> None:
    with pytest.raises(UnicodeDecodeError):
        codec.loads_bounded(b'{"s": "\xff"}')


def test_pickle_key_is_the_documented_one() -> None:
    assert codec.PICKLE_KEY == "__flashpoint_pickle__"
    assert f'"{codec.PICKLE_KEY}"' in (codec.__doc__ or "")
