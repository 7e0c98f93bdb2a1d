"""``flashpoint run FILE::FUNCTION --name value``: one function of a file called with keyword arguments from the
command line, its result printed (plain functions here; an endpoint on a worker in tests/e2e/test_cli_server.py).
``flashpoint run SCRIPT`` keeps running scripts (tests/flash/test_alias.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashpoint import ConfigError
from flashpoint.cli import app
from flashpoint.cli.run import parse_arguments

runner = CliRunner()

APP = textwrap.dedent(
    """
    import asyncio
    from flashpoint import Endpoint, GpuGroup

    def plain(a, b=1, flag=False):
        return {"a": a, "b": b, "flag": flag}

    async def shout(text: str, times: int = 1) -> str:
        await asyncio.sleep(0)
        return text.upper() * times

    def nothing() -> None:
        print("side effect")

    def numbers(n: int):
        yield from range(n)

    def boom() -> None:
        raise RuntimeError("from the function")

    class Greeter:
        def hello(self, who: str = "world") -> str:
            return f"hello {who}"

    @Endpoint(name="remote-sum", gpu=GpuGroup.ANY)
    class Summer:
        def total(self, xs: list) -> int:
            return sum(xs)
    """
)

pytestmark = pytest.mark.usefixtures("restore_imports")


@pytest.fixture
def app_file(tmp_path: Path) -> Path:
    path = tmp_path / "run_app.py"
    path.write_text(APP)
    return path


def run(*args: str) -> Any:
    return runner.invoke(app, ["run", *args], env={"FLASHPOINT_URL": None})


@pytest.mark.parametrize(
    ("words", "args", "kwargs"),
    [
        ([], [], {}),
        (["--x", "3"], [], {"x": 3}),
        (["--x=3", "--name", "ada"], [], {"x": 3, "name": "ada"}),
        (["--data", '{"k": [1, 2]}', "--flag"], [], {"data": {"k": [1, 2]}, "flag": True}),
        (["--flag", "--n", "-1"], [], {"flag": True, "n": -1}),
        (["--max-tokens", "64", "--text", "007"], [], {"max_tokens": 64, "text": "007"}),
        (["7", "seven", "--k", "null"], [7, "seven"], {"k": None}),
        (["--a", "1", "--", "--b", "2"], ["--b", 2], {"a": 1}),
        (["--text="], [], {"text": ""}),
    ],
)
def test_arguments_become_json_values_or_strings(words: list[str], args: list[Any], kwargs: dict[str, Any]) -> None:
    assert parse_arguments(words) == (args, kwargs)


@pytest.mark.parametrize(("words", "message"), [(["--x", "1", "--x", "2"], "given twice"), (["--9", "1"], "names no")])
def test_arguments_that_cannot_be_read_are_refused(words: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_arguments(words)


def test_a_plain_function_gets_its_keyword_arguments_and_its_result_is_printed(app_file: Path) -> None:
    result = run(f"{app_file}::plain", "--a", "[1, 2]", "--flag")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"a": [1, 2], "b": 1, "flag": True}


def test_an_async_function_is_awaited(app_file: Path) -> None:
    result = run(f"{app_file}::shout", "--text", "hi", "--times", "2")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == '"HIHI"'


def test_a_method_of_a_class_and_a_generator(app_file: Path) -> None:
    method = run(f"{app_file}::Greeter.hello", "--who", "you")
    generator = run(f"{app_file}::numbers", "--n", "3")
    nothing = run(f"{app_file}::nothing")

    assert method.stdout.strip() == '"hello you"'
    assert generator.stdout.split() == ["0", "1", "2"]  # one line per value, as it comes
    assert nothing.exit_code == 0 and nothing.stdout == "side effect\n"  # None prints nothing


def test_a_failing_function_shows_its_traceback_and_exits_1(app_file: Path) -> None:
    result = run(f"{app_file}::boom")

    assert result.exit_code == 1
    assert 'raise RuntimeError("from the function")' in result.output
    assert "RuntimeError: from the function" in result.output


def test_mistakes_say_what_to_pass(app_file: Path) -> None:
    missing = run(f"{app_file}::plain", "--b", "2")
    unknown = run(f"{app_file}::plian")
    class_endpoint = run(f"{app_file}::Summer")
    no_function = run(f"{app_file}::")
    no_file = run(f"{app_file.parent / 'nope.py'}::plain")

    assert isinstance(missing.exception, ConfigError)
    assert "plain(a, b=1, flag=False): missing a required argument: 'a'" in str(missing.exception)
    assert "pass --a VALUE --b VALUE --flag VALUE" in str(missing.exception)
    assert isinstance(unknown.exception, ConfigError)
    assert "has no 'plian' (it defines: plain, shout, nothing, numbers, boom, Greeter" in str(unknown.exception)
    assert isinstance(class_endpoint.exception, ConfigError)
    assert "class endpoint; name one of its methods: Summer.total" in str(class_endpoint.exception)
    assert isinstance(no_function.exception, ConfigError) and "name a file and a function" in str(no_function.exception)
    assert isinstance(no_file.exception, ConfigError) and "no such file" in str(no_file.exception)


def test_run_help_names_both_forms() -> None:
    result = runner.invoke(app, ["run", "--help"])

    assert result.exit_code == 0
    assert "SCRIPT | FILE::FUNCTION" in result.output
