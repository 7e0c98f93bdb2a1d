"""Call shapes (``hosting.shapes``): taken from live handles, sent as plain data and rebuilt, they check a job's input
exactly as the live function's signature does (a table of handles and payloads against a reference that binds the
real signature); a shape's data is checked before it is trusted."""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from flashpoint import Endpoint, GpuGroup
from flashpoint.errors import BadInputError, ConfigError
from flashpoint.hosting.server import input_checkers
from flashpoint.hosting.shapes import CallShape, call_shape, checkers, shape_of
from flashpoint.wire import codec


@Endpoint(name="shapes-plain", gpu=GpuGroup.ANY)
async def plain(x: int, y: str = "a") -> str:
    return f"{x}{y}"


@Endpoint(name="shapes-kinds", gpu=GpuGroup.ANY)
def kinds(a: int, /, b: int, *rest: int, c: int, d: int = 0, **more: Any) -> int:
    return a


@Endpoint(name="shapes-bare", gpu=GpuGroup.ANY)
def bare() -> None:
    return None


@Endpoint(name="shapes-class", gpu=GpuGroup.ANY)
class Model:
    def predict(self, data: dict[str, Any], *, top: int = 5) -> dict[str, Any]:
        return data

    def info(self) -> str:
        return "model"


@Endpoint(name="shapes-one-method", gpu=GpuGroup.ANY)
class Single:
    def run(self, text: str) -> str:
        return text


@Endpoint(name="shapes-shared", gpu=GpuGroup.ANY)
def speak(text: str) -> str:
    return text


@Endpoint(name="shapes-shared", gpu=GpuGroup.ANY)
class Voices:
    def list(self, lang: str) -> list[str]:
        return [lang]


command = Endpoint(name="shapes-command", gpu=GpuGroup.ANY, worker_command=["python", "handler.py"])
api = Endpoint(name="shapes-api", gpu=GpuGroup.ANY)


@api.post("/compute")
async def compute(numbers: list[float]) -> float:
    return sum(numbers)


HANDLES: dict[str, Any] = {
    "shapes-plain": plain,
    "shapes-kinds": kinds,
    "shapes-bare": bare,
    "shapes-class": Model,
    "shapes-one-method": Single,
    "shapes-shared": speak,
    "shapes-command": command,
    "shapes-api": api,
}

PAYLOADS: list[Any] = [
    {},
    {"x": 1},
    {"x": 1, "y": "b"},
    {"x": 1, "nope": 2},
    {"y": "b"},
    5,
    None,
    [1, 2],
    {codec.ARGS_KEY: [1]},
    {codec.ARGS_KEY: [1, "b"]},
    {codec.ARGS_KEY: [1, 2, 3, 4], "c": 1},
    {codec.ARGS_KEY: [1, 2], "c": 1, "z": 3},
    {"a": 1, "b": 2, "c": 3},
    {codec.ARGS_KEY: "no list"},
    {"method": "predict", "data": {}},
    {"method": "predict", "data": {}, "top": 3},
    {"method": "predict"},
    {"method": "info"},
    {"method": "info", "extra": 1},
    {"method": "nope"},
    {"method": ["un", "hashable"]},
    {"method": ""},
    {"data": {}},
    {"text": "hi"},
    {"lang": "en"},
]


def _reference(handle: Any) -> Callable[[Any], None]:
    """The checks as server.input_checker made them before shapes: the live signature bound directly (a class's
    method with its ``self``, given as a leading None)."""
    name = handle.spec.name

    def fail(message: str) -> BadInputError:
        return BadInputError(f"endpoint {name!r}: {message}", code="bad_input")

    def bind(signature: inspect.Signature, payload: Any, *leading: Any) -> None:
        if not isinstance(payload, dict):
            raise fail(f"input must be a JSON object of keyword arguments for {name}{signature}, e.g. "
                       f'{{"input": {{"data": ...}}}}; got {type(payload).__name__}')  # fmt: skip
        try:
            args, kwargs = codec.decode_call(payload) if codec.ARGS_KEY in payload else ((), payload)
            signature.bind(*leading, *args, **kwargs)
        except TypeError as exc:
            raise fail(f"input does not fit {name}{signature}: {exc}") from None

    if inspect.isclass(handle.__wrapped__):
        cls, methods = handle.__wrapped__, handle.spec.methods

        def check_method(payload: Any) -> None:
            params = dict(payload) if isinstance(payload, dict) else payload
            method = params.pop("method", None) if isinstance(params, dict) else None
            if method is None and len(methods) > 1:
                raise fail(f'name a method in "method" ({", ".join(methods)}), e.g. {{"method": "{methods[0]}", ...}}')
            method = method or methods[0]
            if method not in methods:
                raise fail(f"unknown method {method!r}; methods: {', '.join(methods)}")
            bind(inspect.signature(getattr(cls, method)), params, None)

        return check_method
    signature = inspect.signature(handle.__wrapped__)
    return lambda payload: bind(signature, payload)


def _answer(check: Callable[[Any], None], payload: Any) -> str | None:
    try:
        check(payload)
    except BadInputError as exc:
        assert exc.code == "bad_input"
        # a shape's method is shown as its instance is called, without ``self``
        return str(exc).replace("(self, ", "(").replace("(self)", "()")
    return None


def _sent(shapes: dict[str, CallShape]) -> dict[str, CallShape]:
    """Shapes as a loader sends them: plain data, pickled, read back."""
    data = pickle.loads(pickle.dumps({t: s.to_data() for t, s in shapes.items()}, protocol=5))
    return {t: CallShape.from_data(d) for t, d in data.items()}


@pytest.mark.parametrize("name", [n for n in HANDLES if n not in ("shapes-command", "shapes-api")])
def test_shapes_sent_as_data_check_input_as_the_live_signature_does(name: str) -> None:
    handle = HANDLES[name]
    live = checkers(name, shape_of(handle), "queue")
    sent = checkers(name, _sent(shape_of(handle)), "queue")
    served = input_checkers({name: handle})
    assert set(live) == set(sent) == set(served)
    for target, member in handle.targets().items():
        reference = _reference(member)
        for payload in PAYLOADS:
            expected = _answer(reference, payload)
            for table in (live, sent, served):
                assert _answer(table[f"{name}/{target}"], payload) == expected, (target, payload)
                if len(handle.targets()) == 1:
                    assert _answer(table[name], payload) == expected, payload


def test_a_shared_name_needs_its_target_and_checks_each() -> None:
    table = checkers("shapes-shared", _sent(shape_of(speak)), "queue")
    assert set(table) == {"shapes-shared", "shapes-shared/speak", "shapes-shared/Voices"}
    with pytest.raises(BadInputError, match=r"several functions or classes \(speak, Voices\)"):
        table["shapes-shared"]({"text": "hi"})
    table["shapes-shared/Voices"]({"lang": "en"})
    with pytest.raises(BadInputError, match="does not fit"):
        table["shapes-shared/speak"]({"lang": "en"})


def test_commands_and_routes_get_no_checker() -> None:
    assert shape_of(command) == {} and shape_of(api) == {}
    assert checkers("shapes-command", {}, "queue") == {}
    assert checkers("shapes-command", None, "queue") == {}
    assert checkers("shapes-api", shape_of(plain), "route") == {}
    assert input_checkers({"shapes-command": command, "shapes-api": api}) == {}


def test_messages_name_the_key_or_the_given_name() -> None:
    by_id = checkers("shop.prod.shapes-plain", shape_of(plain), "queue")
    assert set(by_id) == {"shop.prod.shapes-plain", "shop.prod.shapes-plain/plain"}
    with pytest.raises(BadInputError, match=r"endpoint 'shop.prod.shapes-plain': input does not fit shop"):
        by_id["shop.prod.shapes-plain"]({})
    named = checkers("shop.prod.shapes-plain", shape_of(plain), "queue", name="shapes-plain")
    with pytest.raises(BadInputError, match=r"input does not fit shapes-plain\(x: 'int', y: 'str' = 'a'\)"):
        named["shop.prod.shapes-plain"]({})


def test_a_class_shape_lists_its_methods_less_self() -> None:
    shape = call_shape(Model)
    assert shape.methods is not None
    assert [name for name, _ in shape.methods] == ["predict", "info"]
    predict = dict(shape.methods)["predict"]
    assert predict.params == (("data", "POSITIONAL_OR_KEYWORD", False), ("top", "KEYWORD_ONLY", True))
    assert dict(shape.methods)["info"].params == ()
    assert CallShape.from_data(shape.to_data()) == shape


def test_a_function_shape_keeps_kinds_defaults_and_text() -> None:
    shape = call_shape(kinds)
    assert [(n, k, d) for n, k, d in shape.params] == [
        ("a", "POSITIONAL_ONLY", False),
        ("b", "POSITIONAL_OR_KEYWORD", False),
        ("rest", "VAR_POSITIONAL", False),
        ("c", "KEYWORD_ONLY", False),
        ("d", "KEYWORD_ONLY", True),
        ("more", "VAR_KEYWORD", False),
    ]
    assert shape.text == str(inspect.signature(kinds.__wrapped__))
    assert CallShape.from_data(shape.to_data()) == shape


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"params": []},
        {"params": "x", "text": "()"},
        {"params": [["x", "NOT_A_KIND", False]], "text": "()"},
        {"params": [["x", "POSITIONAL_OR_KEYWORD"]], "text": "()"},
        {"params": [["x", "POSITIONAL_OR_KEYWORD", 1]], "text": "()"},
        {"params": [["not an identifier", "POSITIONAL_OR_KEYWORD", False]], "text": "()"},
        {"params": [["a", "KEYWORD_ONLY", False], ["b", "POSITIONAL_ONLY", False]], "text": "()"},
        {"params": [["a", "POSITIONAL_OR_KEYWORD", True], ["b", "POSITIONAL_OR_KEYWORD", False]], "text": "()"},
        {"params": [["a", "POSITIONAL_OR_KEYWORD", False], ["a", "KEYWORD_ONLY", False]], "text": "()"},
        {"params": [], "text": "()", "methods": []},
        {"params": [], "text": "()", "methods": [["m", {"params": [], "text": "()", "methods": [["n", {}]]}]]},
        {"params": [], "text": "()", "methods": [[1, {"params": [], "text": "()"}]]},
    ],
)
def test_data_that_is_no_shape_is_refused(data: Any) -> None:
    with pytest.raises(ConfigError, match="call shape"):
        CallShape.from_data(data)


def test_a_long_signature_text_is_cut() -> None:
    shape = CallShape.from_data({"params": [], "text": "(" + "x" * 10_000 + ")"})
    assert len(shape.text) == 2000
