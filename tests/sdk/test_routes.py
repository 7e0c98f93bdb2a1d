"""Tests for flashpoint.sdk.routes: declaring HTTP routes on an Endpoint (Flash's checks), the spec they give, the
functions they return, and how a worker loads them (route_target, route_table); discovery of route endpoints."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint, InvalidEndpointError
from flashpoint.hosting.discovery import load_endpoints
from flashpoint.sdk.endpoint import EndpointClient, EndpointFunction
from flashpoint.sdk.endpointclient import RouteCall
from flashpoint.sdk.routes import ROUTES_KEY, is_route_endpoint, path_params, route_table, route_target
from flashpoint.spec import RESERVED_NAMES, RESERVED_PATHS, RouteSpec, ServerlessScalerType
from flashpoint.worker.handler import load_target


def declare(**options: Any) -> Endpoint:
    return Endpoint(**{"name": "my-api", **options})


async def _compute(numbers: list[float]) -> dict[str, float]:
    return {"sum": sum(numbers)}


def _pid() -> int:
    return os.getpid()


# --- the declaration checks, at decoration time ----------------------------------------------------------------------

REFUSED: list[tuple[str, dict[str, Any], Callable[[Endpoint], Any], type[Exception], str]] = [
    ("no name", {"name": None}, lambda api: api.post("/compute"), InvalidEndpointError, "name is required"),
    ("relative path", {}, lambda api: api.post("compute"), InvalidEndpointError, "starts with '/'"),
    ("empty path", {}, lambda api: api.get(""), InvalidEndpointError, "starts with '/'"),
    ("not a string", {}, lambda api: api.get(7), InvalidEndpointError, "starts with '/'"),  # type: ignore[arg-type]
    ("dot segment", {}, lambda api: api.get("/a/../b"), InvalidEndpointError, "'..' segments"),
    ("space", {}, lambda api: api.get("/a b"), InvalidEndpointError, "no spaces"),
    ("query", {}, lambda api: api.get("/a?x=1"), InvalidEndpointError, "'[?]'"),
    ("fragment", {}, lambda api: api.get("/a#top"), InvalidEndpointError, "'#'"),
    ("open brace", {}, lambda api: api.get("/a/{b"), InvalidEndpointError, "written {name}"),
    ("bad param name", {}, lambda api: api.get("/a/{1b}"), InvalidEndpointError, "written {name}"),
    ("bad convertor", {}, lambda api: api.get("/a/{b:date}"), InvalidEndpointError, "convertors"),
    ("data in a declaration", {}, lambda api: api.post("/x", {"a": 1}), TypeError, "only for clients"),  # type: ignore[arg-type]
    ("a class", {}, lambda api: api.post("/x")(dict), InvalidEndpointError, "served by a function"),
    ("a builtin", {}, lambda api: api.post("/x")(len), InvalidEndpointError, "served by a function"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "declaration", "error", "match"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_a_bad_declaration_is_refused_with_what_to_do(
    options: dict[str, Any], declaration: Callable[[Endpoint], Any], error: type[Exception], match: str
) -> None:
    api = Endpoint(**{k: v for k, v in {"name": "my-api", **options}.items() if v is not None})

    with pytest.raises(error, match=match):
        declaration(api)

    assert api.spec.routes == ()  # nothing was declared


@pytest.mark.parametrize("path", RESERVED_PATHS)
def test_reserved_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidEndpointError, match=f"path '{path}' is reserved"):
        declare().get(path)


@pytest.mark.parametrize("name", RESERVED_NAMES)
def test_a_route_endpoint_may_not_take_a_name_the_server_serves(name: str) -> None:
    api = Endpoint(name=name)

    with pytest.raises(InvalidEndpointError, match="taken by the server's own routes") as info:
        api.post("/compute")

    assert f"name='{name}-api'" in str(info.value)  # what to do instead


def test_a_reserved_name_is_refused_only_on_route_endpoints() -> None:
    @Endpoint(name="metrics")
    async def metrics(data: dict[str, Any]) -> dict[str, Any]:
        return data

    assert metrics.spec.name == "metrics"


@pytest.mark.parametrize(
    ("first", "second"),
    [("/items/{item_id}", "/items/{item_id}"), ("/items/{a}", "/items/{b}"), ("/n/{x:int}", "/n/{y:int}")],
)
def test_the_same_method_and_path_twice_is_refused(first: str, second: str) -> None:
    api = declare()
    api.get(first)(_pid)

    def other() -> None: ...

    with pytest.raises(InvalidEndpointError, match=r"duplicate route GET .* already served by _pid\(\)"):
        api.get(second)(other)

    assert [route.target for route in api.spec.routes] == ["_pid"]


def test_the_same_path_with_another_method_or_convertor_is_another_route() -> None:
    api = declare()
    api.get("/items/{item_id}")(_pid)
    api.put("/items/{item_id}")(_pid)
    api.get("/n/{x:int}")(_pid)
    api.get("/n/{x}")(_pid)

    assert [(r.method, r.path) for r in api.spec.routes] == [
        ("GET", "/items/{item_id}"),
        ("PUT", "/items/{item_id}"),
        ("GET", "/n/{x:int}"),
        ("GET", "/n/{x}"),
    ]


def test_an_endpoint_that_decorates_takes_no_routes() -> None:
    ep = declare()

    @ep
    async def infer(data: dict[str, Any]) -> dict[str, Any]:
        return data

    with pytest.raises(InvalidEndpointError, match="either a queue endpoint or a set of routes"):
        ep.post("/compute")
    assert isinstance(infer, EndpointFunction)


def test_a_route_endpoint_decorates_no_function_or_class() -> None:
    api = declare()
    api.post("/compute")(_compute)

    def infer(data: dict[str, Any]) -> dict[str, Any]:
        return data

    class Model:
        def predict(self) -> None: ...

    for target in (infer, Model):
        with pytest.raises(
            InvalidEndpointError, match=f"cannot also decorate {target.__name__}: an endpoint is either"
        ):
            api(target)
    assert api.spec.kind == "routes"


def test_a_route_endpoint_takes_no_queue_calls() -> None:
    api = declare()
    api.post("/compute")(_compute)

    with pytest.raises(InvalidEndpointError, match="takes no queue calls") as info:
        api({"numbers": [1]})
    assert "Endpoint(id='my-api').post" in str(info.value)
    for verb in ("run", "runsync", "stream", "cancel", "explain"):
        with pytest.raises(AttributeError, match=f"serves HTTP routes and has no {verb}"):
            getattr(api, verb)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        api.nothing  # type: ignore[attr-defined]  # noqa: B018


def test_an_endpoint_without_routes_says_how_to_use_it() -> None:
    with pytest.raises(AttributeError, match="decorate a function or class with it"):
        declare().run  # type: ignore[attr-defined]  # noqa: B018


# --- what a declaration returns and the spec it gives ----------------------------------------------------------------


def test_a_route_decorator_returns_the_function_itself_which_runs_here() -> None:
    api = declare()

    returned = api.get("/pid")(_pid)
    compute = api.post("/compute")(_compute)

    assert returned is _pid and compute is _compute
    assert returned() == os.getpid()  # called from Python: in this process, no server, no worker
    assert asyncio.run(compute([1.0, 2.5])) == {"sum": 3.5}


def test_the_spec_lists_every_route_so_far() -> None:
    api = declare(cpu="cpu3c-2-4", workers=(1, 3))
    assert (api.spec.kind, api.spec.routes, api.spec.serves_routes) == ("function", (), False)

    api.post("/compute")(_compute)
    first = api.spec
    api.get("/items/{item_id}")(_pid)

    assert first.routes == (RouteSpec("POST", "/compute", "_compute"),)  # a spec is a value: it never changes
    assert api.spec.routes == (RouteSpec("POST", "/compute", "_compute"), RouteSpec("GET", "/items/{item_id}", "_pid"))
    assert api.spec.kind == "routes" and api.spec.serves_routes
    assert (api.spec.name, api.spec.cpu, api.spec.workers_min, api.spec.workers_max) == ("my-api", ("cpu3c-2-4",), 1, 3)


def test_route_endpoints_scale_by_request_count_unless_told() -> None:
    default, given = declare(), declare(scaler_type=ServerlessScalerType.QUEUE_DELAY, scaler_value=2)
    assert default.spec.scaler_type is ServerlessScalerType.QUEUE_DELAY  # a queue endpoint's default, until routes

    default.post("/compute")(_compute)
    given.post("/compute")(_compute)

    assert default.spec.scaler_type is ServerlessScalerType.REQUEST_COUNT  # Flash's load-balanced default
    assert (given.spec.scaler_type, given.spec.scaler_value) == (ServerlessScalerType.QUEUE_DELAY, 2)


def test_a_route_endpoint_pickles_with_its_spec() -> None:
    api = declare()
    api.post("/compute")(_compute)

    copy = pickle.loads(pickle.dumps(api))

    assert copy.spec == api.spec


def test_a_client_keeps_its_http_verbs() -> None:
    client = Endpoint(id="my-api")

    call = client.post("/compute", {"numbers": [1]})

    assert isinstance(client, EndpointClient) and isinstance(call, RouteCall)
    with pytest.raises(TypeError, match="not a route decorator"):
        call(_compute)  # closes the coroutine: nothing was sent


@pytest.mark.parametrize(
    ("path", "names"),
    [("/a", ()), ("/items/{item_id}", ("item_id",)), ("/f/{a:int}/{rest:path}", ("a", "rest"))],
)
def test_path_params(path: str, names: tuple[str, ...]) -> None:
    assert path_params(path) == names


# --- how a worker loads the routes -----------------------------------------------------------------------------------


def test_a_module_level_endpoint_is_loaded_by_import_path() -> None:
    from tests.apps import routes_app

    target = route_target(routes_app.api)

    assert target == routes_app.api.worker_target()
    assert (target.import_path, target.pickled) == ("tests.apps.routes_app:api", None)
    loaded = load_target(import_path=target.import_path)  # what the worker does with --routes --import
    assert loaded is routes_app.api
    assert [(m, p, fn.__name__) for m, p, fn in route_table(loaded)] == [
        (r.method, r.path, r.target) for r in routes_app.api.spec.routes
    ]


def test_routes_declared_in_a_function_travel_as_a_pickled_table(tmp_path: Path) -> None:
    api = declare()

    @api.post("/double")
    def double(x: int) -> int:
        return 2 * x

    api.get("/pid")(_pid)

    target = route_target(api)

    assert target.import_path is None and target.pickled is not None
    table = pickle.loads(target.pickled)
    assert list(table) == [ROUTES_KEY]
    assert [(m, p) for m, p, _ in table[ROUTES_KEY]] == [("POST", "/double"), ("GET", "/pid")]
    code = tmp_path / "routes.pkl"
    code.write_bytes(target.pickled)
    routes = route_table(load_target(pickle_file=str(code)))  # what the worker does with --routes --pickle
    assert routes[0][2](21) == 42 and routes[1][2]() == os.getpid()


def test_an_endpoint_no_module_names_travels_pickled() -> None:
    from tests.apps import routes_app

    api = declare()
    api.get("/health")(routes_app.health)  # importable function, but no module holds this Endpoint

    target = route_target(api)

    assert target.pickled is not None
    assert route_table(pickle.loads(target.pickled))[0][2] is routes_app.health  # pickled by reference


@pytest.mark.usefixtures("restore_imports")
def test_routes_from_two_modules_travel_pickled(tmp_path: Path) -> None:
    (tmp_path / "routes_base.py").write_text(
        "from flashpoint import Endpoint\napi = Endpoint(name='split-api')\n@api.get('/a')\ndef a() -> int:\n"
        "    return 1\n"
    )
    (tmp_path / "routes_more.py").write_text(
        "from routes_base import api\n@api.get('/b')\ndef b() -> int:\n    return 2\n"
    )
    sys.path.insert(0, str(tmp_path))
    import routes_base  # type: ignore[import-not-found]
    import routes_more  # type: ignore[import-not-found]  # noqa: F401

    target = route_target(routes_base.api)

    assert target.import_path is None  # importing routes_base alone would declare /a only
    assert [p for _, p, _ in route_table(pickle.loads(target.pickled or b""))] == ["/a", "/b"]


def test_an_endpoint_without_routes_has_no_worker_target() -> None:
    with pytest.raises(InvalidEndpointError, match="declares no route"):
        route_target(declare())


def test_route_table_refuses_anything_else() -> None:
    with pytest.raises(TypeError, match="a route worker serves an Endpoint with routes"):
        route_table(_pid)
    with pytest.raises(TypeError, match="got Endpoint"):
        route_table(declare())


# --- discovery -------------------------------------------------------------------------------------------------------

APP = """
from flashpoint import Endpoint

api = Endpoint(name="my-api", workers=(1, 3))
unused = Endpoint(name="nothing-declared")
client = Endpoint(id="elsewhere")

@api.post("/compute")
async def compute(numbers: list[float]) -> dict:
    return {"sum": sum(numbers)}

@api.get("/health")
def health() -> dict:
    return {"ok": True}

@Endpoint(name="infer")
async def infer(data: dict) -> dict:
    return data
"""


@pytest.mark.usefixtures("restore_imports")
def test_discovery_finds_route_endpoints_beside_queue_ones(tmp_path: Path) -> None:
    app = tmp_path / "routes_discovered.py"
    app.write_text(textwrap.dedent(APP))

    found = load_endpoints(str(app))

    assert list(found) == ["my-api", "infer"]
    api = found["my-api"]
    assert is_route_endpoint(api) and api.spec.kind == "routes"
    assert [(r.method, r.path) for r in api.spec.routes] == [("POST", "/compute"), ("GET", "/health")]
    assert api.worker_target().import_path == "routes_discovered:api"
    assert load_endpoints(f"{app}:api") == {"my-api": api}
    assert load_endpoints(f"{app}:my-api") == {"my-api": api}


@pytest.mark.usefixtures("restore_imports")
def test_discovery_refuses_a_queue_endpoint_and_a_route_endpoint_of_one_name(tmp_path: Path) -> None:
    app = tmp_path / "routes_clash.py"
    app.write_text(
        textwrap.dedent(
            """
            from flashpoint import Endpoint

            api = Endpoint(name="shared")

            @api.get("/health")
            def health() -> dict:
                return {}

            @Endpoint(name="shared")
            async def infer(data: dict) -> dict:
                return data
            """
        )
    )

    with pytest.raises(Exception, match="either a queue endpoint or a set of routes"):
        load_endpoints(str(app))


@pytest.mark.usefixtures("restore_imports")
def test_a_flash_app_declares_routes_unchanged(tmp_path: Path) -> None:
    app = tmp_path / "flash_routes_app.py"
    app.write_text(
        textwrap.dedent(
            """
            from runpod_flash import Endpoint, GpuGroup

            api = Endpoint(name="flash-api", gpu=GpuGroup.ANY, workers=(1, 3))

            @api.post("/compute")
            async def compute(numbers: list[float]) -> dict:
                return {"sum": sum(numbers)}
            """
        )
    )

    api = load_endpoints(str(app))["flash-api"]

    assert api.spec.routes == (RouteSpec("POST", "/compute", "compute"),)
    assert api.worker_target().import_path == "flash_routes_app:api"


def test_declaring_routes_loads_no_http_stack() -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from flashpoint import Endpoint
        api = Endpoint(name="my-api")
        @api.post("/compute")
        async def compute(numbers: list) -> dict:
            return {}
        assert api.spec.kind == "routes"
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    heavy = ("fastapi", "starlette", "pydantic", "uvicorn")
    assert [m for m in loaded if m.split(".")[0] in heavy] == []
