"""The isolated loader (``hosting.loader``): real child processes load small project folders written to tmp_path
(functions, classes, commands, routes, prints, errors, a top level that never ends, hostile answers), the restricted
unpickler on crafted pickles, and the test process never importing a project's modules."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint
from flashpoint.errors import BadInputError, ConfigError
from flashpoint.gpus import ANY_GPU, GpuGroup
from flashpoint.hosting.loader import LoadedProject, child_env, load_isolated, read_answer
from flashpoint.hosting.shapes import checkers, shape_of
from flashpoint.spec import EndpointSpec, WorkerTarget, expand_env

HEAD = "from flashpoint import Endpoint, GpuGroup\n"


def project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def code(text: str) -> str:
    return HEAD + textwrap.dedent(text)


def load(root: Path, **kwargs: Any) -> LoadedProject:
    return load_isolated(root, timeout_s=kwargs.pop("timeout_s", 60.0), **kwargs)


FUNCTION = HEAD + textwrap.dedent(
    """
    @Endpoint(name="infer", gpu=GpuGroup.AMPERE_80, workers=(0, 3), env={"MODE": "fast"})
    async def infer(x: int, y: str = "a") -> str:
        return f"{x}{y}"
    """
)


def test_a_function_comes_back_as_spec_target_shapes_and_kind(tmp_path: Path) -> None:
    loaded = load(project(tmp_path / "p", {"app.py": FUNCTION}))
    assert loaded.root == (tmp_path / "p").resolve()
    assert list(loaded.endpoints) == ["infer"] and loaded.skipped == []
    infer = loaded.endpoints["infer"]
    assert isinstance(infer.spec, EndpointSpec) and infer.spec.name == "infer"
    assert infer.spec.workers_max == 3 and dict(infer.spec.env) == {"MODE": "fast"}
    # the very spec this process would build from the same declaration
    assert infer.spec == Endpoint(name="infer", gpu=GpuGroup.AMPERE_80, workers=(0, 3), env={"MODE": "fast"}).spec
    assert infer.target == WorkerTarget(import_path="app:infer")
    assert infer.kind == "queue"
    assert infer.shapes["infer"].text == "(x: int, y: str = 'a') -> str"
    check = checkers("infer", infer.shapes, infer.kind)
    check["infer"]({"x": 1})
    with pytest.raises(BadInputError, match=r"does not fit infer\(x: int, y: str = 'a'\) -> str: missing"):
        check["infer"]({"y": "b"})


def test_a_class_comes_back_with_its_methods(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.py": code(
                """
            @Endpoint(name="model", gpu=GpuGroup.ANY)
            class Model:
                def predict(self, data: dict, *, top: int = 5) -> dict:
                    return data

                def info(self) -> str:
                    return "m"
            """
            )
        },
    )
    model = load(root).endpoints["model"]
    assert model.spec.kind == "class" and model.spec.methods == ("predict", "info")
    assert model.target.import_path == "model:Model" and model.kind == "queue"
    shape = model.shapes["Model"]
    assert shape.methods is not None and [m for m, _ in shape.methods] == ["predict", "info"]
    check = checkers("model", model.shapes, model.kind)["model"]
    check({"method": "predict", "data": {}})
    with pytest.raises(BadInputError, match=r'name a method in "method" \(predict, info\)'):
        check({"data": {}})
    with pytest.raises(BadInputError, match="does not fit model"):
        check({"method": "info", "x": 1})


def test_a_command_and_a_route_endpoint(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "handler.py": HEAD + 'sdxl = Endpoint(name="sdxl", gpu=GpuGroup.ANY, worker_command=["python", "h.py"])\n',
            "api.py": code(
                """
            api = Endpoint(name="my-api", gpu=GpuGroup.ANY, workers=(1, 2))

            @api.post("/compute")
            async def compute(numbers: list[float]) -> dict:
                return {"sum": sum(numbers)}
            """
            ),
        },
    )
    loaded = load(root)
    assert list(loaded.endpoints) == ["my-api", "sdxl"]  # file order
    sdxl, api = loaded.endpoints["sdxl"], loaded.endpoints["my-api"]
    assert sdxl.kind == "queue" and sdxl.shapes == {} and sdxl.target.command == ("python", "h.py")
    assert checkers("sdxl", sdxl.shapes, sdxl.kind) == {}
    assert api.kind == "route" and api.spec.serves_routes and api.shapes == {}
    assert [(r.method, r.path) for r in api.spec.routes] == [("POST", "/compute")]
    assert api.target.import_path == "api:api"
    assert checkers("my-api", api.shapes, api.kind) == {}


def test_a_shared_name_comes_back_with_each_target_and_its_pickled_table(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "tts.py": code(
                """
            @Endpoint(name="tts", gpu=GpuGroup.ANY)
            def speak(text: str) -> str:
                return text

            @Endpoint(name="tts", gpu=GpuGroup.ANY)
            class Voices:
                def list(self, lang: str) -> list:
                    return [lang]
            """
            )
        },
    )
    tts = load(root).endpoints["tts"]
    assert list(tts.shapes) == ["speak", "Voices"]
    assert isinstance(tts.target.pickled, bytes)  # opaque to the server: never unpickled by it
    table = checkers("tts", tts.shapes, tts.kind)
    assert set(table) == {"tts", "tts/speak", "tts/Voices"}
    with pytest.raises(BadInputError, match="several functions or classes"):
        table["tts"]({"text": "hi"})


def test_what_the_project_prints_does_not_spoil_the_answer(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "app.py": "import os, subprocess, sys\n"
            "print('hello from the top level')\n"
            "os.write(1, b'straight to fd 1\\n')\n"
            "subprocess.run([sys.executable, '-c', 'print(\"a child prints\")'], check=True)\n" + FUNCTION
        },
    )
    assert list(load(root).endpoints) == ["infer"]


def test_files_whose_top_level_runs_work_are_skipped_with_why(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {"app.py": FUNCTION, "script.py": "import asyncio\nasync def main():\n    pass\nasyncio.run(main())\n"},
    )
    loaded = load(root)
    assert list(loaded.endpoints) == ["infer"]
    assert loaded.skipped == [("script.py", "line 4 runs an event loop (asyncio.run(...))")]


def test_an_import_error_is_quoted_with_its_traceback(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"app.py": FUNCTION + "\ndef helper():\n    return undefined_name\n\nhelper()\n"})
    with pytest.raises(ConfigError) as caught:
        load(root)
    message = str(caught.value)
    assert "app.py: importing app.py failed: NameError: name 'undefined_name' is not defined" in message
    assert 'File "app.py", line 8, in helper' in message and "return undefined_name" in message
    assert str(tmp_path) not in message  # the server's folders are not the deployer's business


def test_a_decoration_error_is_quoted(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"app.py": HEAD + '\n@Endpoint(name="x", workers=(3, 1))\ndef x(): pass\n'})
    with pytest.raises(ConfigError, match=r"InvalidEndpointError: Endpoint 'x': workers=\(3, 1\): min is greater"):
        load(root)


def test_scaling_options_travel_to_the_server_but_a_scaler_function_is_refused(tmp_path: Path) -> None:
    scheduled = code(
        """
        @Endpoint(name="s", workers=(0, 2), target_concurrency=3, workers_schedule={"0 9 * * 1-5": 1})
        async def s(x: int) -> int:
            return x
        """
    )
    spec = load(project(tmp_path / "ok", {"app.py": scheduled})).endpoints["s"].spec
    assert (spec.scaling.target_concurrency, spec.scaling.workers_schedule) == (3, (("0 9 * * 1-5", 1),))
    own = code(
        """
        def decide(metrics):
            return 1

        @Endpoint(name="u", scaler=decide)
        async def u(x: int) -> int:
            return x
        """
    )
    with pytest.raises(ConfigError, match=r"endpoint 'u': scaler= runs a function in the plane's process"):
        load(project(tmp_path / "own", {"app.py": own}))


def test_a_project_without_endpoints_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"util.py": "VALUE = 1\n", "tests/test_app.py": FUNCTION})
    with pytest.raises(ConfigError, match="no endpoints found in the project"):
        load(root)


def test_two_files_declaring_one_name_with_other_options_are_refused(tmp_path: Path) -> None:
    other = FUNCTION.replace("workers=(0, 3)", "workers=(0, 5)").replace("def infer", "def infer_too")
    root = project(tmp_path / "p", {"a.py": FUNCTION, "b.py": other})
    with pytest.raises(ConfigError, match="both declare an endpoint named 'infer' with other options"):
        load(root)


def test_a_top_level_that_never_ends_is_stopped(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"app.py": "import time\nopen('started', 'w').close()\ntime.sleep(3600)\n"})
    with pytest.raises(ConfigError, match=r"took longer than 1.5 s; does a module's top level wait on something"):
        load(root, timeout_s=1.5)
    assert (root / "started").exists()


def test_a_loader_that_exits_without_answering(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"app.py": "import os, sys\nsys.stderr.write('going away\\n')\nos._exit(3)\n"})
    with pytest.raises(ConfigError, match=r"exited with code 3 without answering; it said:\ngoing away"):
        load(root)


def test_an_answer_over_the_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="answered with more than 100 bytes"):
        load(project(tmp_path / "p", {"app.py": FUNCTION}), max_bytes=100)


def test_the_loader_gets_none_of_the_servers_credentials(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "app.py": "import os\n"
            + FUNCTION.replace(
                'env={"MODE": "fast"}',
                'env={k: os.environ.get(k, "-") for k in ("FLASHPOINT_API_KEY", "FLASHPOINT_URL", "RUNPOD_API_KEY", '
                '"KEPT")}',
            )
        },
    )
    secrets = {"FLASHPOINT_API_KEY": "k", "FLASHPOINT_URL": "http://x", "RUNPOD_API_KEY": "r", "KEPT": "yes"}
    env = load(root, env={**os.environ, **secrets}).endpoints["infer"].spec.env
    assert dict(env) == {"FLASHPOINT_API_KEY": "-", "FLASHPOINT_URL": "-", "RUNPOD_API_KEY": "-", "KEPT": "yes"}
    assert child_env({"FLASHPOINT_API_KEY": "k", "PATH": "/bin"}) == {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1"}


def test_two_projects_with_one_module_name_do_not_meet(tmp_path: Path) -> None:
    first = project(tmp_path / "one", {"app.py": FUNCTION})
    second = project(tmp_path / "two", {"app.py": FUNCTION.replace('"infer"', '"other"').replace("x: int", "z: int")})
    before = set(sys.modules)
    a, b = load(first), load(second)
    assert list(a.endpoints) == ["infer"] and list(b.endpoints) == ["other"]
    assert a.endpoints["infer"].shapes["infer"].params[0][0] == "x"
    assert b.endpoints["other"].shapes["infer"].params[0][0] == "z"
    assert a.endpoints["infer"].target == b.endpoints["other"].target == WorkerTarget(import_path="app:infer")
    # nothing of either project was imported here
    assert "app" not in sys.modules
    inside = str(tmp_path)
    assert not [n for n in set(sys.modules) - before if str(getattr(sys.modules[n], "__file__", "")).startswith(inside)]
    assert not list((tmp_path / "one").glob("__pycache__"))  # no bytecode written into an unpacked deploy


def test_checkers_from_a_loaded_project_answer_as_the_live_handles_do(tmp_path: Path, restore_imports: None) -> None:
    from flashpoint.hosting.discovery import load_endpoints

    source = HEAD + textwrap.dedent(
        """
        @Endpoint(name="twin-fn", gpu=GpuGroup.ANY)
        def fn(a: int, /, b: int, *rest: int, c: int, d: int = 0, **more: int) -> int:
            return a

        @Endpoint(name="twin-model", gpu=GpuGroup.ANY)
        class Model:
            def predict(self, data: dict, top: int = 5) -> dict:
                return data

            def info(self) -> str:
                return "m"
        """
    )
    root = project(tmp_path / "p", {"loader_twin.py": source})
    loaded = load(root)
    live = load_endpoints(str(root / "loader_twin.py"))  # imported here, on purpose, to compare
    payloads: list[Any] = [
        {},
        {"__flashpoint_args__": [1, 2], "c": 3},
        {"__flashpoint_args__": [1, 2, 3], "c": 3, "d": 4, "e": 5},
        {"a": 1, "b": 2, "c": 3},
        {"method": "predict", "data": {}},
        {"method": "predict"},
        {"method": "info", "x": 1},
        {"method": "nope"},
        "text",
    ]
    for name, handle in live.items():
        endpoint = loaded.endpoints[name]
        assert endpoint.shapes == shape_of(handle)
        from_shapes = checkers(name, endpoint.shapes, endpoint.kind)
        from_live = checkers(name, shape_of(handle), "queue")
        assert set(from_shapes) == set(from_live)
        for key in from_live:
            for payload in payloads:
                answers: list[str | None] = []
                for table in (from_shapes, from_live):
                    try:
                        table[key](payload)
                        answers.append(None)
                    except BadInputError as exc:
                        answers.append(str(exc))
                assert answers[0] == answers[1], (key, payload)


# --------------------------------------------------------------------------------------------------------------------
# Hostile answers


def test_a_project_that_smuggles_a_callable_into_the_answer_is_refused(tmp_path: Path) -> None:
    # the project rewrites the child's pickle.dumps, so the answer would make the server run a command
    marker = tmp_path / "pwned"
    root = project(
        tmp_path / "p",
        {
            "app.py": FUNCTION
            + textwrap.dedent(
                f"""
                import os, pickle

                class Evil:
                    def __reduce__(self):
                        return (os.system, ("touch {marker}",))

                _dumps = pickle.dumps
                pickle.dumps = lambda obj, protocol=None: _dumps(Evil(), protocol=protocol)
                """
            )
        },
    )
    with pytest.raises(ConfigError, match=r"answered with a posix\.system, which the server does not accept"):
        load(root)
    assert not marker.exists()


def test_a_project_that_puts_its_own_object_in_a_spec_is_refused(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "app.py": FUNCTION
            + textwrap.dedent(
                """
                class Marker:
                    pass

                object.__setattr__(infer.spec, "env", {"MODE": Marker()})
                """
            )
        },
    )
    with pytest.raises(ConfigError, match=r"answered with a app\.Marker, which the server does not accept"):
        load(root)


class _Popen:
    def __reduce__(self) -> tuple[Any, ...]:
        return (subprocess.Popen, (["true"],))


class _Eval:
    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, ("1",))


@pytest.mark.parametrize(
    ("obj", "named"),
    [
        (os.system, "posix.system"),
        (_Popen(), "subprocess.Popen"),
        (_Eval(), "builtins.eval"),
        (getattr, "builtins.getattr"),
        (expand_env, "flashpoint.spec.expand_env"),  # a function of an accepted module is no value class
        (ConfigError("x"), "flashpoint.errors.ConfigError"),
        ({"spec": _Popen()}, "subprocess.Popen"),
        (Path("/"), "pathlib.PosixPath"),
    ],
)
def test_the_unpickler_refuses_every_other_global(obj: Any, named: str) -> None:
    with pytest.raises(ConfigError, match=f"answered with a {named}, which the server does not accept"):
        read_answer(pickle.dumps(obj, protocol=5))


def test_the_unpickler_refuses_an_exception_of_an_accepted_module() -> None:
    crafted = b"\x80\x05\x8c\x0fflashpoint.spec\x94\x8c\x13MissingSecretsError\x94\x93\x94."
    with pytest.raises(ConfigError, match=r"flashpoint\.spec\.MissingSecretsError, which the server does not"):
        read_answer(crafted)


def test_the_unpickler_builds_specs_and_plain_data() -> None:
    spec = EndpointSpec(name="x", candidates=(ANY_GPU,), env={"A": "b"})
    value = {"spec": spec, "set": {1, 2}, "frozen": frozenset({"a"}), "bytes": b"\x00", "f": 1.5, "n": None,
             "group": GpuGroup.ANY, "target": WorkerTarget(pickled=b"opaque")}  # fmt: skip
    assert read_answer(pickle.dumps(value, protocol=5)) == value
    assert read_answer(pickle.dumps(ANY_GPU, protocol=5)) is ANY_GPU


@pytest.mark.parametrize("data", [b"", b"not a pickle", pickle.dumps({"a": 1}, protocol=5)[:-3]])
def test_a_garbled_answer_is_refused(data: bytes) -> None:
    with pytest.raises(ConfigError, match="something that is no answer"):
        read_answer(data)
