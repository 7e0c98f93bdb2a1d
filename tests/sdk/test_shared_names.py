"""Shared endpoint names, quick: functions and classes declared with one name and the same options are one endpoint
that names, per job, the one it calls; the worker runs that one only. Real processes: tests/e2e/test_shared_names.py.

Covers ``flashpoint.sdk.handles`` (the handles of a shared name) for tests/test_layout.py."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint, GpuGroup, InvalidEndpointError
from flashpoint.errors import BadInputError
from flashpoint.hosting.discovery import load_endpoints
from flashpoint.hosting.server import input_checkers
from flashpoint.jobs import Reason
from flashpoint.spec import TARGETS_KEY, options_of, worker_target_for, worker_target_for_all
from flashpoint.wire import codec
from flashpoint.worker.handler import Handler, HandlerError
from tests.scheduler.door import open_door


@Endpoint(name="shared-module", gpu=GpuGroup.ANY)
async def module_a(data: dict) -> str:
    return "a"


@Endpoint(name="shared-module", gpu=GpuGroup.ANY)
async def module_b(data: dict) -> str:
    return "b"


# ---------------------------------------------------------------------------------------------------------------------
# Declaring: who joins whom


@pytest.mark.parametrize(
    ("first", "second", "joined"),
    [
        ({}, {}, True),
        ({"gpu": GpuGroup.ANY}, {}, True),  # the default, written out
        ({"workers": 2}, {"workers": 2}, True),
        ({"workers": 2}, {"workers": 3}, False),
        ({"gpu": GpuGroup.ANY}, {"gpu": "NVIDIA H200"}, False),
        ({"env": {"A": "1"}}, {"env": {"A": "2"}}, False),
        ({}, {"cpu": "cpu3c-1-2"}, False),
        ({"idle_timeout": 5}, {"idle_timeout": 5.0}, True),
    ],
)
def test_same_options_join_one_endpoint_other_options_start_another(
    first: dict[str, Any], second: dict[str, Any], joined: bool
) -> None:
    @Endpoint(name="shared-table", **first)
    def one(data: dict) -> int:
        return 1

    @Endpoint(name="shared-table", **second)
    def two(data: dict) -> int:
        return 2

    assert (one.shared is two.shared) is joined
    assert list(two.targets()) == (["one", "two"] if joined else ["two"])
    assert two._extra() == (
        {"flashpoint": {"binary_ok": True, "target": "two"}} if joined else {"flashpoint": {"binary_ok": True}}
    )


def test_a_function_and_a_class_join_and_a_redefinition_replaces() -> None:
    @Endpoint(name="shared-kinds")
    def fn(data: dict) -> int:
        return 1

    @Endpoint(name="shared-kinds")
    class Model:
        def predict(self, data: dict) -> int:
            return 2

    assert Model.spec.kind == "class" and options_of(Model.spec) == options_of(fn.spec)
    assert list(fn.targets()) == ["fn", "Model"]

    @Endpoint(name="shared-kinds")
    def fn(data: dict) -> int:
        return 3

    assert list(Model.targets()) == ["fn", "Model"]
    assert Model.targets()["fn"] is fn


def test_a_lone_declaration_sends_no_target_and_keeps_its_worker_target() -> None:
    @Endpoint(name="shared-lone")
    def lone(data: dict) -> int:
        return 1

    assert lone._extra() == {"flashpoint": {"binary_ok": True}}
    assert lone.worker_target() == worker_target_for(lone.__wrapped__)


def test_a_handle_nobody_holds_leaves_the_endpoint() -> None:
    def declare() -> None:
        @Endpoint(name="shared-gone")
        def gone(data: dict) -> int:
            return 1

    declare()

    @Endpoint(name="shared-gone")
    def kept(data: dict) -> int:
        return 2

    import gc

    gc.collect()
    assert list(kept.targets()) == ["kept"]


def test_several_targets_ship_as_one_table_importable_ones_by_path() -> None:
    def local(data: dict) -> str:
        return "local"

    target = worker_target_for_all([module_a.__wrapped__, local])
    assert target.import_path is None and target.pickled is not None
    table = pickle.loads(target.pickled)[TARGETS_KEY]
    assert table["module_a"] == "tests.sdk.test_shared_names:module_a"
    assert table["local"]({}) == "local"
    assert module_b.worker_target() == worker_target_for_all([module_a.__wrapped__, module_b.__wrapped__])


# ---------------------------------------------------------------------------------------------------------------------
# The worker: runs the named target, never another


class Model:
    def __init__(self, scale: int = 1) -> None:
        self.scale = scale

    def predict(self, data: dict) -> int:
        return data["x"] * self.scale


def _job(target: Any, payload: dict[str, Any], **meta: Any) -> dict[str, Any]:
    if target is not None:
        meta["target"] = target
    return {"id": "j", "input": codec.encode_call((payload,), {}), "flashpoint": meta}


async def test_the_worker_runs_the_target_the_job_names() -> None:
    def local(data: dict) -> str:
        return "local"

    handler = Handler(
        {TARGETS_KEY: {"module_a": "tests.sdk.test_shared_names:module_a", "local": local, "Model": Model}}
    )
    assert list(handler.targets) == ["module_a", "local", "Model"]
    assert await handler(_job("module_a", {})) == "a"
    assert await handler(_job("local", {})) == "local"
    assert await handler(_job("Model", {"x": 2}, init=codec.encode_call((3,), {}))) == 6


@pytest.mark.parametrize(
    ("table", "target", "message"),
    [
        (
            {"a": "tests.sdk.test_shared_names:module_a", "b": "tests.sdk.test_shared_names:module_b"},
            "c",
            "no function or",
        ),
        ({"a": "tests.sdk.test_shared_names:module_a", "b": "tests.sdk.test_shared_names:module_b"}, None, "several"),
        (
            {"a": "tests.sdk.test_shared_names:module_a", "b": "tests.sdk.test_shared_names:module_b"},
            3,
            "no function or",
        ),
    ],
)
async def test_a_job_naming_no_known_target_fails_user_error(table: dict, target: Any, message: str) -> None:
    handler = Handler({TARGETS_KEY: table})
    with pytest.raises(HandlerError, match=message) as failed:
        await handler(_job(target, {}))
    assert failed.value.reason is Reason.USER_ERROR


async def test_a_lone_target_runs_untargeted_jobs_and_refuses_other_names() -> None:
    handler = Handler(module_a.__wrapped__)
    assert await handler(_job(None, {})) == "a"
    assert await handler(_job("module_a", {})) == "a"
    with pytest.raises(HandlerError, match="module_b"):
        await handler(_job("module_b", {}))


# ---------------------------------------------------------------------------------------------------------------------
# The engine and serve mode


async def test_the_plane_registers_one_endpoint_and_refuses_other_options() -> None:
    door = await open_door()
    try:

        @Endpoint(name="shared-plane", gpu=GpuGroup.ANY)
        def fn(data: dict) -> int:
            return 1

        door.plane.register(fn.spec, fn.worker_target())

        @Endpoint(name="shared-plane", gpu=GpuGroup.ANY)
        class Late:
            def predict(self, data: dict) -> int:
                return 2

        door.plane.register(Late.spec, Late.worker_target())  # joins: workers started from now on load both
        assert list(door.plane.endpoints) == ["shared-plane"]
        assert door.plane.endpoint("shared-plane").target == Late.worker_target()

        @Endpoint(name="shared-plane", gpu=GpuGroup.ANY, workers=3)
        def other(data: dict) -> int:
            return 3

        with pytest.raises(InvalidEndpointError, match="declare every function or class of one endpoint with the same"):
            door.plane.register(other.spec, other.worker_target())
    finally:
        await door.plane.close()


def test_serve_discovers_a_shared_name_once_with_all_targets(tmp_path: Path) -> None:
    path = tmp_path / "app_shared_serve.py"
    path.write_text(
        textwrap.dedent(
            """
            from flashpoint import Endpoint

            @Endpoint(name="tts")
            def speak(text: str) -> str:
                return text

            @Endpoint(name="tts")
            class Voices:
                def list(self, lang: str) -> list:
                    return [lang]
            """
        )
    )
    handles = load_endpoints(str(path))
    assert list(handles) == ["tts"]
    assert list(handles["tts"].targets()) == ["speak", "Voices"]
    table = pickle.loads(handles["tts"].worker_target().pickled or b"")[TARGETS_KEY]
    assert table == {"speak": "app_shared_serve:speak", "Voices": "app_shared_serve:Voices"}

    checkers = input_checkers(handles)
    checkers["tts/speak"]({"text": "hi"})
    checkers["tts/Voices"]({"lang": "en"})
    with pytest.raises(BadInputError, match="does not fit"):
        checkers["tts/speak"]({"lang": "en"})
    with pytest.raises(BadInputError, match=r"several functions or classes \(speak, Voices\)"):
        checkers["tts"]({"text": "hi"})


async def test_serve_registers_a_shared_name_once_and_http_jobs_carry_their_target(tmp_path: Path) -> None:
    import httpx

    from flashpoint.api.app import Dispatch, create_app
    from flashpoint.api.runpod import Intake
    from tests.scheduler.door import BASE_URL

    path = tmp_path / "app_shared_http.py"
    path.write_text(
        textwrap.dedent(
            """
            from flashpoint import Endpoint

            @Endpoint(name="pair")
            def left(x: int) -> int:
                return x

            @Endpoint(name="pair")
            def right(y: int) -> int:
                return y
            """
        )
    )
    handles = load_endpoints(str(path))
    door = await open_door()
    try:
        for handle in handles.values():
            door.plane.register(handle.spec, handle.worker_target())
        assert list(door.plane.endpoints) == ["pair"]
        app = Dispatch(create_app(door.plane, api_keys=(), intake=Intake(input_checkers(handles))), door.plane)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
            ok = await client.post("/v2/pair/run", json={"input": {"y": 1}, "flashpoint": {"target": "right"}})
            assert ok.status_code == 200, ok.text
            assert door.plane.job(ok.json()["id"]).extra["flashpoint"] == {"target": "right"}
            misfit = await client.post("/v2/pair/run", json={"input": {"x": 1}, "flashpoint": {"target": "right"}})
            assert misfit.status_code == 400 and "does not fit" in misfit.text
            untargeted = await client.post("/v2/pair/run", json={"input": {"x": 1}})
            assert untargeted.status_code == 400 and '"target": "left"' in untargeted.json()["error"]
            for unknown in ("middle", 7, {"x": 1}):  # refused at intake: nothing is stored
                wrong = await client.post("/v2/pair/run", json={"input": {"x": 1}, "flashpoint": {"target": unknown}})
                assert wrong.status_code == 400 and "serves: left, right" in wrong.json()["error"], wrong.text
            assert door.plane.book.queued_jobs == 1
    finally:
        await door.plane.close()


def test_code_shipped_by_value_carries_the_handles_it_names() -> None:
    """A class that names itself, or a function that names another endpoint, is pickled with those handles: without
    their connection or declaration group (weak references do not pickle)."""
    import cloudpickle

    @Endpoint(name="pickled-other", gpu=GpuGroup.ANY)
    def other(x: int) -> int:
        return x

    @Endpoint(name="pickled-self", gpu=GpuGroup.ANY)
    class Model:
        def predict(self, x: int) -> str:
            return f"{Model.__name__}:{x}:{other.spec.name}"

    assert other.shared is not None  # the group holds weak references, which would not pickle
    copy = cloudpickle.loads(cloudpickle.dumps(Model.__wrapped__))
    assert copy().predict(2) == "Model:2:pickled-other"
    handle = cloudpickle.loads(cloudpickle.dumps(other))
    assert handle.spec == other.spec and handle.shared is None and handle._conn is None
