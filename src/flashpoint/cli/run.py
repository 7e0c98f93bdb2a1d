"""``flashpoint run SCRIPT.py [ARGS...]``: run a script as ``python SCRIPT.py ARGS`` would, with ``runpod_flash``
resolving to flashpoint, so an unmodified Runpod Flash script runs its endpoints here; and
``flashpoint run app.py::fn [--name value ...]``: call one function of a file (an endpoint or a plain function) with
those keyword arguments and print its result, with no ``asyncio.run`` boilerplate in the file.

Edge module: may import anything in flashpoint, plus typer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import runpy
import sys
import traceback
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from flashpoint.errors import ConfigError, JobFailedError
from flashpoint.flash import alias
from flashpoint.hosting.discovery import load_module
from flashpoint.sdk.endpoint import EndpointClass, EndpointFunction
from flashpoint.terminal import inert, json_text

#: the command's click settings: every word after SCRIPT is the script's (``flashpoint run app.py --help`` hands
#: ``--help`` to app.py), while ``flashpoint run --help`` still shows this command's help
CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True}

#: what separates the file from the function: ``app.py::fn`` (as pytest names a test)
SEPARATOR = "::"


def run(
    script: Annotated[
        str,
        typer.Argument(
            metavar="SCRIPT | FILE::FUNCTION",
            help="The Python file to run as __main__, or FILE::FUNCTION (e.g. app.py::infer) to call one function.",
            show_default=False,
        ),
    ],
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="For SCRIPT: its arguments (its sys.argv[1:]). For FILE::FUNCTION: --name value pairs, the function's "
            "keyword arguments (values parsed as JSON when they parse, else strings; a --flag alone is true).",
            show_default=False,
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            metavar="URL",
            show_default=False,
            help="Send endpoint calls to the flashpoint server at URL (sets FLASHPOINT_URL) instead of running them "
            "on this process's embedded plane.",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", metavar="KEY", show_default=False, help="With --url: its API key (FLASHPOINT_API_KEY)."),
    ] = None,
) -> None:
    """Run SCRIPT as `python SCRIPT ARGS` would, with `runpod_flash` resolving to flashpoint; or call one function:
    `flashpoint run app.py::infer --data '{"x": 1}'`.

    An unmodified Runpod Flash script (`from runpod_flash import Endpoint, ...`, then `await fn(...)`) runs its
    endpoints on flashpoint: on the embedded server (this machine's GPUs, or FLASHPOINT_SIMULATED_GPUS), or on the
    server at FLASHPOINT_URL when that is set. Workers resolve `runpod_flash` the same way. runpod-flash need not be
    installed; where it is, the script gets flashpoint instead.

    With FILE::FUNCTION, the file is imported (as `flashpoint serve` imports an app), the function is called with the
    --name value pairs as keyword arguments (awaited if it is async; an @Endpoint runs on a worker, like `await
    fn(...)`), and its result is printed as JSON. Class.method calls a method of `Class()`.
    """
    if url:
        os.environ["FLASHPOINT_URL"] = url
    if key:
        os.environ["FLASHPOINT_API_KEY"] = key
    if SEPARATOR in script:
        source, _, name = script.rpartition(SEPARATOR)
        call_function(source, name, args or [])
        return
    if has_local_entrypoint(Path(script)):
        run_entrypoint_file(Path(script), args or [])
        return
    run_script(Path(script), args or [])


# ----------------------------------------------------------------------------------------------------------------
# flashpoint run APP.py with a @runpod.local_entrypoint (Runpod SDK 2.x)


def has_local_entrypoint(path: Path) -> bool:
    """Whether a file declares a Runpod SDK 2.x entrypoint at its top level: a function decorated with
    ``@runpod.local_entrypoint`` (or ``@local_entrypoint``); read with ``ast``, nothing imported."""
    import ast

    try:
        tree = ast.parse(path.expanduser().read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False  # run_script says what is wrong with it
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                name = decorator.attr if isinstance(decorator, ast.Attribute) else getattr(decorator, "id", None)
                if name == "local_entrypoint":
                    return True
    return False


def run_entrypoint_file(script: Path, args: Sequence[str]) -> None:
    """Import an App file as a module (as ``rp flash dev`` does: its resources importable by the workers, never run
    as ``__main__``), then run its ``@runpod.local_entrypoint`` here, with every resource on the fleet (the embedded
    plane, or ``--url``'s server); exit 1 with its traceback when it raises."""
    from flashpoint.runpodapps.entrypoint import get_entrypoint, run_entrypoint

    path = script.expanduser()
    if not path.is_file():
        raise ConfigError(f"no such file: {str(path)!r}; name the file to run, e.g. flashpoint run main.py")
    saved_argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        module = load_module(str(path))
        entry = get_entrypoint()
        if entry is None or getattr(entry, "__module__", None) != module.__name__:
            raise ConfigError(f"{path} declares no @runpod.local_entrypoint function at module level")
        run_entrypoint(entry)
    except (SystemExit, KeyboardInterrupt, ConfigError):
        raise
    except BaseException as exc:
        _print_traceback(exc, str(path.resolve()))
        raise typer.Exit(1) from None
    finally:
        sys.argv = saved_argv


# ----------------------------------------------------------------------------------------------------------------
# flashpoint run SCRIPT


def run_script(script: Path, args: Sequence[str]) -> None:
    path = script.expanduser()
    if not path.is_file():
        raise ConfigError(f"no such file: {str(path)!r}; name the script to run, e.g. flashpoint run main.py")
    # as `python SCRIPT` does: the script's folder first on sys.path (its sibling modules import), and its argv
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with alias.installed():
            runpy.run_path(str(path), run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        _print_traceback(exc, str(path))
        raise typer.Exit(1) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _print_traceback(exc: BaseException, filename: str) -> None:
    """What `python SCRIPT` prints: the traceback from the file's own frames on, inert (its message may quote a job's
    error)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    sys.stderr.write(inert("".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))))


# ----------------------------------------------------------------------------------------------------------------
# flashpoint run FILE::FUNCTION


def parse_arguments(words: Sequence[str]) -> tuple[list[Any], dict[str, Any]]:
    """``--name value``, ``--name=value`` and ``--flag`` (true) into keyword arguments (``-`` in names becomes
    ``_``); other words, and every word after ``--``, into positional ones. A value is JSON when it parses as JSON
    (``3``, ``true``, ``'{"x": 1}'``), else the string as typed.

    Raises:
        ConfigError: a name given twice, or a bare ``--``-prefixed word that names nothing.
    """
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            args.extend(_value(w) for w in words[i:])
            break
        if not word.startswith("--") or word == "--":
            args.append(_value(word))
            continue
        name, equals, text = word[2:].partition("=")
        if not equals:
            if i < len(words) and not words[i].startswith("--"):
                text, i = words[i], i + 1
        value: Any = _value(text) if equals or text else True
        name = name.replace("-", "_")
        if not name.isidentifier():
            raise ConfigError(f"{word!r} names no argument; write --name value, e.g. --data '{{\"x\": 1}}'")
        if name in kwargs:
            raise ConfigError(f"--{name} is given twice")
        kwargs[name] = value
    return args, kwargs


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def find_function(source: str, name: str) -> Any:
    """``name`` (``fn`` or ``Class.method``) in the module of ``source`` (imported as discovery imports an app)."""
    if not source or not name:
        raise ConfigError(f"name a file and a function: flashpoint run app.py{SEPARATOR}infer")
    module = load_module(source)
    obj: Any = module
    path: list[str] = []
    for part in name.split("."):
        if inspect.isclass(obj) or isinstance(obj, EndpointClass):
            obj = obj()  # Class.method: a method of an instance made with no arguments (an endpoint's is remote)
        if not hasattr(obj, part):
            where = f"{source}{SEPARATOR}{'.'.join(path)}" if path else source
            known = f" (it defines: {', '.join(_defined(module))})" if not path and _defined(module) else ""
            raise ConfigError(f"{where} has no {part!r}{known}")
        obj = getattr(obj, part)
        path.append(part)
    if isinstance(obj, EndpointClass):
        methods = ", ".join(f"{name}.{m}" for m in obj.spec.methods)
        raise ConfigError(f"{name} is a class endpoint; name one of its methods: {methods}")
    if not callable(obj):
        raise ConfigError(f"{source}{SEPARATOR}{name} is a {type(obj).__name__}, not a function")
    return obj


def _defined(module: Any) -> list[str]:
    """The public functions, classes and endpoints a module defines itself (not the names it imports)."""
    return [
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and callable(value) and getattr(value, "__module__", None) == module.__name__
    ]


def _check_call(fn: Any, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Arguments that do not fit the signature fail here, with the signature and the options to pass."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read: the call itself will say
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        options = " ".join(f"--{p} VALUE" for p in signature.parameters if p != "self")
        raise ConfigError(f"{name}{signature}: {exc}; pass {options or 'no arguments'}") from None


def call_function(source: str, name: str, words: Sequence[str]) -> None:
    """Import ``source``, call ``name`` with the arguments in ``words`` and print what it returns (or yields)."""
    args, kwargs = parse_arguments(words)
    with alias.installed():
        fn = find_function(source, name)
        _check_call(fn, name, args, kwargs)
        try:
            if isinstance(fn, EndpointFunction) and (
                inspect.isasyncgenfunction(fn.__wrapped__) or inspect.isgeneratorfunction(fn.__wrapped__)
            ):
                asyncio.run(_print_stream(fn.stream(*args, **kwargs)))
                return
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
            if inspect.isasyncgen(result):
                asyncio.run(_print_stream(result))
            elif inspect.isgenerator(result):
                _print_chunks(result)
            elif result is not None:
                print(_shown(result), flush=True)
        except (SystemExit, KeyboardInterrupt):
            raise
        except JobFailedError as exc:
            if exc.remote_traceback:
                print(inert(exc.remote_traceback.rstrip()), file=sys.stderr)
            raise
        except BaseException as exc:
            _print_traceback(exc, str(getattr(sys.modules.get(getattr(fn, "__module__", "")), "__file__", "")))
            raise typer.Exit(1) from None


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def _print_stream(chunks: AsyncIterator[Any]) -> None:
    async for chunk in chunks:
        print(_shown(chunk, indent=None), flush=True)


def _print_chunks(chunks: Iterator[Any]) -> None:
    for chunk in chunks:
        print(_shown(chunk, indent=None), flush=True)


def _shown(value: Any, indent: int | None = 2) -> str:
    """A result as JSON when it is JSON (whose escapes parse back to it exactly), else its repr, inert."""
    try:
        return json_text(value, indent=indent)
    except (TypeError, ValueError):
        return inert(repr(value))
