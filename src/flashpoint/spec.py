"""Endpoint specs: the frozen, validated options of an endpoint, and how a worker runs its code.

Everything an ``@Endpoint(...)`` call says is checked here, at decoration time, with a message that says what to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from flashpoint.errors import InvalidEndpointError, UnknownGPUError
from flashpoint.flashtypes import CpuInstanceType, CudaVersion, DataCenter, NetworkVolume, PodTemplate, cuda_tuple
from flashpoint.gpus import Candidate, GpuGroup, candidates, describe
from flashpoint.scaling import OPTIONS as SCALING_OPTIONS, Scaling, scaling

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
OPTIONS = (
    "name",
    "id",
    "gpu",
    "cpu",
    "gpu_count",
    "workers",
    "idle_timeout",
    "execution_timeout_ms",
    "max_concurrency",
    "env",
    "dependencies",
    "system_dependencies",
    "scaler_type",
    "scaler_value",
    "accelerate_downloads",
    "volume",
    "datacenter",
    "flashboot",
    "image",
    "template",
    "min_cuda_version",
    "worker_command",
    "worker_cwd",
    "priority",
    "preemptible",
    "placement",
    *SCALING_OPTIONS,
)
#: the priority classes every plane knows, highest first (a server may define more: ``PlaneSettings.priority_classes``)
PRIORITY_CLASSES = {"high": 2, "normal": 1, "low": 0}
#: how a worker's node is chosen among those that fit its model: ``pack`` (best fit: the node left with the fewest
#: free devices, so whole nodes stay free for large requests) or ``spread`` (the node with the most free devices)
PLACEMENTS = ("pack", "spread")
#: a volume's directory name, a datacenter label: no path separators, no dot-only names
LABEL = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ServerlessScalerType(str, Enum):
    """How an endpoint adds workers, as in Flash."""

    #: add a worker when the oldest queued job has waited ``scaler_value`` seconds (the first one at once)
    QUEUE_DELAY = "QUEUE_DELAY"
    #: keep about ``(queued + running jobs) / scaler_value`` workers
    REQUEST_COUNT = "REQUEST_COUNT"

    def __str__(self) -> str:
        return self.value


#: an app's or a deployment environment's name: letters, digits, ``_`` and ``-``, no dots (an endpoint id joins them
#: with dots, so it splits back one way only)
APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
#: Flash's default environment (``flash deploy`` without ``--env``)
DEFAULT_ENV = "production"


def endpoint_id(app: str, env: str, name: str) -> str:
    """The stable id of endpoint ``name`` in environment ``env`` of ``app``: ``app.env.name``, URL-safe, unique on a
    server (app and environment names hold no dots), the same for every version of it. Runpod's ``/v2/{id}/...``
    and a route endpoint's ``/{id}/...`` prefix take it."""
    return f"{app}.{env}.{name}"


def split_endpoint_id(text: str) -> tuple[str, str, str] | None:
    """``(app, env, name)`` of an endpoint id, or None when ``text`` is not one (a bare name)."""
    app, _, rest = text.partition(".")
    env, _, name = rest.partition(".")
    if not name or not APP_NAME.fullmatch(app) or not APP_NAME.fullmatch(env):
        return None
    return app, env, name


#: HTTP methods a route endpoint serves (Flash's ``get/post/put/delete/patch``)
ROUTE_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
#: paths a route endpoint may not declare (Flash reserves them: a worker's health check and its job route)
RESERVED_PATHS = ("/ping", "/execute")
#: endpoint names a route endpoint may not take: ``flashpoint serve`` serves ``/{name}/...`` beside its own routes
RESERVED_NAMES = ("v1", "v2", "metrics", "docs", "redoc", "openapi.json", "ping", "health", "static", "flash")


#: a secret's name: Runpod's rule (a letter or ``_`` first, then letters, digits and ``_.-``, at most 191 characters)
#: without its ``/``, so a name is never a path; names that begin with ``RUNPOD`` are refused, as Runpod refuses them
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,190}")
#: a secret reference in an ``env`` value: Runpod's template ``{{ RUNPOD_SECRET_<name> }}``, spaces inside the braces
#: optional; the name is checked apart, so a malformed one is refused instead of passed on as text
SECRET_REFERENCE = re.compile(r"\{\{\s*RUNPOD_SECRET_([^\s{}]*)\s*\}\}")


def secret_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a secret's name (a sentence that says what to write), or None when it is fine."""
    if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
        shown = repr(name)[:80]
        return (
            f"a secret's name is a letter or '_' and then letters, digits, '_', '.' or '-', at most 191 characters "
            f"(e.g. HF_TOKEN or hf-token); got {shown}"
        )
    if name.upper().startswith("RUNPOD"):
        return f"secret names that begin with RUNPOD are Runpod's own; choose another than {name!r}"
    return None


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret stored on the server, named in an endpoint's ``env``; its workers get the value in that variable.

    ``env={"HF_TOKEN": Secret("hf-token")}`` is the same as Runpod's template ``{"HF_TOKEN": "{{ RUNPOD_SECRET_hf-token
    }}"}``, which is also accepted, within a longer value too (``str(Secret(...))`` is the template). The value is set
    with ``flashpoint secret set NAME`` and never leaves the server but in the environment of the endpoint's workers.

    Args:
        name: the secret's name, as ``flashpoint secret set`` was given it.

    Raises:
        InvalidEndpointError: ``name`` is not a secret's name.

    Example:
        ``@Endpoint(name="llm", gpu=GpuGroup.ANY, env={"HF_TOKEN": Secret("hf-token")})``
    """

    name: str

    def __post_init__(self) -> None:
        problem = secret_name_problem(self.name)
        if problem is not None:
            raise InvalidEndpointError(problem)

    def __str__(self) -> str:
        return "{{ RUNPOD_SECRET_" + self.name + " }}"


class MissingSecretsError(InvalidEndpointError):
    """An endpoint's ``env`` names secrets that are not set; ``names`` lists every one, in the order first named."""

    code = "missing_secret"

    def __init__(self, endpoint: str, names: Sequence[str], *, hint: str = "") -> None:
        self.endpoint = endpoint
        self.names = tuple(names)
        listed = ", ".join(self.names)
        super().__init__(
            f"endpoint {endpoint!r} needs secrets that are not set: {listed}; "
            + (
                hint
                or "set each with `flashpoint secret set NAME` (the value is read from stdin or a prompt; add "
                "`--data-dir DIR` while the server is not running), or drop it from the endpoint's env"
            )
        )


#: what a control plane is given to read secrets: a name's value, or None when it is not set
SecretResolver = Callable[[str], "str | None"]


def no_secrets(name: str) -> str | None:
    """The resolver of a plane with no secret store: every secret is missing."""
    return None


def env_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """The secrets an ``env`` (a spec's, once checked) names, each once, in the order first named."""
    names: dict[str, None] = {}
    for value in env.values():
        for match in SECRET_REFERENCE.finditer(value):
            names.setdefault(match.group(1))
    return tuple(names)


def secret_references(spec: EndpointSpec) -> tuple[str, ...]:
    """The secrets ``spec``'s ``env`` names, each once, in the order first named."""
    return env_secrets(spec.env)


def missing_secrets(env: Mapping[str, str], resolve: SecretResolver) -> tuple[str, ...]:
    """The secrets ``env`` names that ``resolve`` has no value for, each once, in the order first named."""
    return tuple(name for name in env_secrets(env) if resolve(name) is None)


def expand_env(env: Mapping[str, str], resolve: SecretResolver, *, endpoint: str) -> dict[str, str]:
    """``env`` with every secret reference replaced by the value ``resolve(name)`` gives (one pass: a value that looks
    like a reference is not expanded again).

    Raises:
        MissingSecretsError: ``resolve`` gave None for some; the error names every one.
    """
    missing: dict[str, None] = {}

    def value_of(match: re.Match[str]) -> str:
        value = resolve(match.group(1))
        if value is None:
            missing.setdefault(match.group(1))
            return ""
        return value

    expanded = {key: SECRET_REFERENCE.sub(value_of, value) for key, value in env.items()}
    if missing:
        raise MissingSecretsError(endpoint, list(missing))
    return expanded


def _env(name: str | None, env: Any) -> dict[str, str]:
    """``env=`` checked: strings or ``Secret``s (kept as Runpod's template), every reference naming a valid secret."""
    env = {} if env is None else env
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | Secret) for k, v in env.items()
    ):
        raise invalid(
            name,
            f"env must map strings to strings or Secret('name')s, e.g. env={{'HF_HOME': '/data'}}; got {env!r}",
        )
    return {key: str(value) for key, value in env.items()}


def _check_references(name: str | None, env: Mapping[str, str]) -> None:
    for key, value in env.items():
        for match in SECRET_REFERENCE.finditer(value):
            problem = secret_name_problem(match.group(1))
            if problem is not None:
                raise invalid(name, f"env[{key!r}] names a secret badly: {problem}")


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One HTTP route of a route endpoint: ``method`` (one of ROUTE_METHODS), ``path`` (``/items/{item_id}``) and the
    name of the function that serves it (its ``__name__``)."""

    method: str
    path: str
    target: str


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """Everything the control plane needs to know about an endpoint; validated at decoration time."""

    name: str
    #: ordered GPU candidates (empty for cpu endpoints)
    candidates: tuple[Candidate, ...]
    #: ordered CPU instance types (``CpuInstanceType`` values such as "cpu3c-2-4"); empty for a GPU endpoint
    cpu: tuple[str, ...] = ()
    gpu_count: int = 1
    workers_min: int = 0
    workers_max: int = 1
    idle_timeout_s: float = 60.0
    #: ``idle_timeout="auto"``: True (its window is sized from its traffic); a number given: False; not given: None
    #: (the server's default decides: ``PlaneSettings.idle_timeout_auto``)
    idle_auto: bool | None = None
    execution_timeout_ms: int = 0
    max_concurrency: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    dependencies: tuple[str, ...] = ()
    system_dependencies: tuple[str, ...] = ()
    scaler_type: ServerlessScalerType = ServerlessScalerType.QUEUE_DELAY
    scaler_value: int = 4
    #: "function", "class", "command", or "routes" (an HTTP-route endpoint: workers serve ``routes`` over HTTP)
    kind: str = "function"
    #: public method names of a class endpoint, in definition order
    methods: tuple[str, ...] = ()
    #: ``datacenter=``: nodes whose ``datacenter`` label is one of these (empty: any node)
    datacenters: tuple[str, ...] = ()
    #: ``min_cuda_version=``: the lowest driver CUDA version a node needs for this GPU endpoint ("12.8"), or None
    min_cuda_version: str | None = None
    #: ``volume=``: persistent directories on the host, seen by workers at /runpod-volume where possible
    volumes: tuple[NetworkVolume, ...] = ()
    #: ``template=``: its env is merged into ``env``; the rest (image, disk, ports) is cloud-only, kept for explain
    template: PodTemplate | None = None
    #: Flash's cloud knobs, accepted with no local effect
    flashboot: bool = True
    accelerate_downloads: bool = True
    #: the cloud-only settings this declaration gave (``"flashboot=False"``, ``"template.imageName='x'"``): recorded,
    #: not applied; ``explain`` lists them
    cloud_only: tuple[str, ...] = ()
    #: an HTTP-route endpoint's routes, in declaration order (empty for a queue endpoint)
    routes: tuple[RouteSpec, ...] = ()
    #: the app and deployment environment a server deployed it to (None: not deployed: a script's, dev's)
    app: str | None = None
    app_env: str | None = None
    #: a run-to-completion endpoint (Runpod SDK 2.x's ``@app.task``): each worker takes one job, then ends
    single_use: bool = False
    #: a cron expression (five fields, Runpod SDK 2.x's ``@schedule(cron=...)``): the server submits a job on it
    schedule: str | None = None
    #: its priority class (``priority=``): "high", "normal" or "low", or a class its server defines
    priority: str = "normal"
    #: ``preemptible=True``: its running workers may be stopped for a higher class's waiting request (their jobs go
    #: back to the queue, reason ``preempted``)
    preemptible: bool = False
    #: ``placement=``: "pack" (best fit, the default) or "spread" (the node with the most free devices)
    placement: str = "pack"
    #: flashpoint's scalers beside ``scaler_type`` (latency, concurrency, a schedule of minimums, a user function)
    scaling: Scaling = field(default_factory=Scaling)

    @property
    def key(self) -> str:
        """How its plane knows it: its endpoint id when deployed (``endpoint_id``), else its name."""
        if self.app is None or self.app_env is None:
            return self.name
        return endpoint_id(self.app, self.app_env, self.name)

    @property
    def uses_gpu(self) -> bool:
        return not self.cpu

    @property
    def serves_routes(self) -> bool:
        """An HTTP-route endpoint: its workers serve HTTP on ``$PORT`` instead of pulling jobs."""
        return self.kind == "routes"

    def describe_gpu(self) -> str:
        if not self.uses_gpu:
            return "cpu=" + " > ".join(self.cpu)
        return " > ".join(describe(c) for c in self.candidates) + (
            f" (x{self.gpu_count})" if self.gpu_count > 1 else ""
        )


@dataclass(frozen=True, slots=True)
class WorkerTarget:
    """How a worker runs the endpoint: flashpoint's runtime importing it by path or loading cloudpickle bytes, or
    a command of the user's own (e.g. an unmodified ``runpod.serverless.start`` handler) run in ``cwd``."""

    import_path: str | None = None
    pickled: bytes | None = None
    command: tuple[str, ...] | None = None
    cwd: str | None = None


def invalid(name: str | None, message: str) -> InvalidEndpointError:
    """The decoration-time error, naming the endpoint when it has a name."""
    return InvalidEndpointError(f"Endpoint {name!r}: {message}" if name else f"Endpoint: {message}")


def _int(name: str | None, option: str, value: Any, *, minimum: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"{option} must be an integer, got {value!r}; e.g. {example}")
    if value < minimum:
        raise invalid(name, f"{option} must be >= {minimum}, got {value}; e.g. {example}")
    return value


def _workers(name: str | None, value: Any) -> tuple[int, int]:
    if isinstance(value, tuple | list) and len(value) == 2:
        low = _int(name, "workers min", value[0], minimum=0, example="workers=(0, 4)")
        high = _int(name, "workers max", value[1], minimum=1, example="workers=(0, 4)")
        if low > high:
            raise invalid(name, f"workers=({low}, {high}): min is greater than max; write workers=({high}, {low})?")
        return low, high
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"workers must be N or (min, max), got {value!r}; e.g. workers=2 or workers=(0, 4)")
    return 0, _int(name, "workers", value, minimum=1, example="workers=2 (up to two workers)")


def _strings(name: str | None, option: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise invalid(name, f"{option} must be a list of strings, e.g. {option}=['numpy>=1.26']; got {value!r}")
    return tuple(value)


def _requirements(name: str | None, values: tuple[str, ...]) -> tuple[str, ...]:
    """``dependencies`` checked at declaration: each one PEP 508 requirement that reaches the installer as nothing
    else (``environments.keys``); kept as written."""
    if values:
        from flashpoint.environments.keys import normalize_requirement

        _each(name, values, normalize_requirement)
    return values


def _packages(name: str | None, values: tuple[str, ...]) -> tuple[str, ...]:
    """``system_dependencies`` checked at declaration: Debian package names (``environments.system``)."""
    if values:
        from flashpoint.environments.system import validate_package_name

        _each(name, values, validate_package_name)
    return values


def _each(name: str | None, values: tuple[str, ...], check: Callable[[str], object]) -> None:
    """``check`` every value; its ``InvalidEndpointError`` names the endpoint."""
    for value in values:
        try:
            check(value)
        except InvalidEndpointError as exc:
            raise invalid(name, str(exc)) from None


def _cpu(name: str | None, value: Any) -> tuple[str, ...]:
    """``cpu=`` as Flash takes it: an instance type (``CpuInstanceType`` or its string) or a list of them, an ordered
    fallback; duplicates dropped."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items:
        raise invalid(name, "cpu=[] lists no instance type; e.g. cpu=CpuInstanceType.CPU3C_2_4 or cpu='cpu3c-2-4'")
    types: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise invalid(
                name, f"cpu takes CpuInstanceType values or their strings, e.g. cpu='cpu3c-2-4'; got {item!r}"
            )
        try:
            instance = CpuInstanceType(item.strip().lower()).value
        except ValueError:
            known = [t.value for t in CpuInstanceType]
            close = difflib.get_close_matches(item.strip().lower(), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise invalid(name, f"unknown CPU instance type {item!r}; {hint}known: {', '.join(known)}") from None
        if instance not in types:
            types.append(instance)
    return tuple(types)


def _datacenters(name: str | None, value: Any) -> tuple[str, ...]:
    """``datacenter=``: a ``DataCenter``, its string, a node label of the user's own, or a list of those."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, list | tuple | set | frozenset) else [value]
    found: list[str] = []
    for item in items:
        if not isinstance(item, str) or not LABEL.match(item.strip()):
            raise invalid(
                name,
                "datacenter takes DataCenter values or datacenter labels (letters, digits, '.', '_', '-'), "
                f"e.g. datacenter=DataCenter.EU_RO_1 or datacenter='rack-a'; got {item!r}",
            )
        try:
            label = DataCenter.from_string(item).value
        except ValueError:
            label = item.strip()  # a datacenter of the user's own fleet
        if label not in found:
            found.append(label)
    return tuple(found)


def _cuda(name: str | None, value: Any) -> str | None:
    if value is None:
        return None
    text = value.value if isinstance(value, CudaVersion) else value
    try:
        if not isinstance(text, str):
            raise ValueError(text)
        return ".".join(str(part) for part in cuda_tuple(text))
    except ValueError:
        raise invalid(
            name, f"min_cuda_version takes a CudaVersion or a version string, e.g. '12.8'; got {value!r}"
        ) from None


def _volumes(name: str | None, value: Any) -> tuple[NetworkVolume, ...]:
    if value is None:
        return ()
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items:
        raise invalid(name, "volume=[] lists no volume; e.g. volume=NetworkVolume(name='models')")
    for item in items:
        if not isinstance(item, NetworkVolume):
            raise invalid(name, f"volume takes NetworkVolume(name=...) or a list of them; got {item!r}")
        key = volume_key(item)
        if not LABEL.match(key):
            raise invalid(
                name,
                f"volume {key!r}: a volume's name is a directory name here (letters, digits, '.', '_', '-'; no "
                "'/'), e.g. NetworkVolume(name='models')",
            )
    return tuple(items)


def volume_key(volume: NetworkVolume) -> str:
    """The name a volume is known by locally: its ``name``, else its ``id``."""
    return (volume.name or volume.id or "").strip()


def _flag(name: str | None, option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid(name, f"{option} must be True or False, got {value!r}")
    return value


def build_spec(options: dict[str, Any], *, named_later: bool = False) -> EndpointSpec:
    """Validate ``Endpoint(...)``'s options. ``named_later``: a decorator without ``name=`` takes its target's
    ``__name__`` (as Flash derives it) when it decorates; the spec's name is "" until then."""
    name = options.get("name")
    if name is None and named_later:
        name = ""
    elif not isinstance(name, str) or not NAME.match(name):
        raise invalid(
            None,
            f"name must be a non-empty string of letters, digits, '.', '_' or '-' (at most 128), got {name!r}; "
            "e.g. @Endpoint(name='inference', gpu=GpuGroup.ANY)",
        )
    shown = name or None
    gpu, cpu_option = options.get("gpu"), options.get("cpu")
    if gpu is not None and cpu_option is not None:
        raise invalid(
            shown, "gpu and cpu are mutually exclusive: pass gpu=... for a GPU worker or cpu=... for a CPU one"
        )
    cpu = _cpu(shown, cpu_option) if cpu_option is not None else ()
    try:
        ordered = candidates(GpuGroup.ANY if gpu is None else gpu) if not cpu else ()
    except UnknownGPUError as exc:
        where = f"Endpoint {name!r}: " if name else "Endpoint: "
        raise UnknownGPUError(f"{where}{exc}", name=exc.name, suggestions=exc.suggestions) from None
    except InvalidEndpointError as exc:
        raise invalid(shown, str(exc)) from None
    name = shown
    gpu_count = _int(name, "gpu_count", options.get("gpu_count", 1), minimum=1, example="gpu_count=2")
    if cpu and "gpu_count" in options and gpu_count != 1:
        raise invalid(name, "gpu_count needs a GPU endpoint; drop gpu_count or replace cpu=... with gpu=...")
    low, high = _workers(name, options.get("workers", (0, 1)))
    idle = options.get("idle_timeout", 60)
    idle_auto = None if "idle_timeout" not in options else idle == "auto"
    if idle_auto:
        idle = 60  # until the endpoint's traffic sizes its window (``scheduler/keepwarm.py``)
    elif isinstance(idle, bool) or not isinstance(idle, int | float) or not math.isfinite(idle) or idle < 0:
        raise invalid(
            name,
            f"idle_timeout must be seconds >= 0 or 'auto' (sized from traffic), got {idle!r}; e.g. idle_timeout=60",
        )
    timeout_ms = _int(
        name,
        "execution_timeout_ms",
        options.get("execution_timeout_ms", 0),
        minimum=0,
        example="execution_timeout_ms=600_000 (10 minutes; 0 means no limit)",
    )
    concurrency = _int(
        name, "max_concurrency", options.get("max_concurrency", 1), minimum=1, example="max_concurrency=4"
    )
    env = _env(name, options.get("env"))
    cuda = _cuda(name, options.get("min_cuda_version"))
    template = options.get("template")
    if template is not None and not isinstance(template, PodTemplate):
        raise invalid(name, f"template takes a PodTemplate(...), got {template!r}")
    if template is not None:
        env = {**template.env_dict, **env}  # the endpoint's own env wins over its template's
    _check_references(name, env)
    scaler = options.get("scaler_type", ServerlessScalerType.QUEUE_DELAY)
    try:
        scaler_type = ServerlessScalerType(str(scaler).upper())
    except ValueError:
        raise invalid(name, f"scaler_type must be 'QUEUE_DELAY' or 'REQUEST_COUNT', got {scaler!r}") from None
    scaler_value = _int(name, "scaler_value", options.get("scaler_value", 4), minimum=1, example="scaler_value=4")
    return EndpointSpec(
        name=name or "",
        candidates=ordered,
        cpu=cpu,
        gpu_count=gpu_count,
        workers_min=low,
        workers_max=high,
        idle_timeout_s=float(idle),
        idle_auto=idle_auto,
        execution_timeout_ms=timeout_ms,
        max_concurrency=concurrency,
        env=dict(env),
        dependencies=_requirements(name, _strings(name, "dependencies", options.get("dependencies"))),
        system_dependencies=_packages(name, _strings(name, "system_dependencies", options.get("system_dependencies"))),
        scaler_type=scaler_type,
        scaler_value=scaler_value,
        datacenters=_datacenters(name, options.get("datacenter")),
        # Flash floors the CUDA version of GPU endpoints only: checked, then dropped for a CPU endpoint
        min_cuda_version=None if cpu else cuda,
        volumes=_volumes(name, options.get("volume")),
        template=template,
        flashboot=_flag(name, "flashboot", options.get("flashboot", True)),
        accelerate_downloads=_flag(name, "accelerate_downloads", options.get("accelerate_downloads", True)),
        cloud_only=_cloud_only(options, template),
        priority=_priority(name, options.get("priority", "normal")),
        preemptible=_flag(name, "preemptible", options.get("preemptible", False)),
        placement=_placement(name, options.get("placement", "pack")),
        scaling=scaling(name, options, high),
    )


def _priority(name: str | None, value: Any) -> str:
    """``priority=``: a class name ("high", "normal", "low", or one the server defines: a label); the plane checks a
    class it does not know when the endpoint registers."""
    if not isinstance(value, str) or not LABEL.match(value.strip()):
        raise invalid(name, f"priority must be a class name such as 'high', 'normal' or 'low', got {value!r}")
    return value.strip().lower()


def _placement(name: str | None, value: Any) -> str:
    if not isinstance(value, str) or value.strip().lower() not in PLACEMENTS:
        raise invalid(
            name,
            f"placement must be 'pack' (fill nodes, keep whole ones free) or 'spread' (workers apart), got {value!r}",
        )
    return value.strip().lower()


#: PodTemplate fields that only Runpod's cloud applies (its ``env`` reaches the workers here)
_TEMPLATE_CLOUD_FIELDS = (
    "imageName",
    "containerDiskInGb",
    "dockerArgs",
    "ports",
    "startScript",
    "advancedStart",
    "config",
    "containerRegistryAuthId",
    "name",
)


def _cloud_only(options: Mapping[str, Any], template: PodTemplate | None) -> tuple[str, ...]:
    """The settings given that mean something only in Runpod's cloud, as ``option=value`` strings."""
    given = [f"{option}={options[option]!r}" for option in ("flashboot", "accelerate_downloads") if option in options]
    if template is not None:
        default = PodTemplate()
        given += [
            f"template.{field}={getattr(template, field)!r}"
            for field in _TEMPLATE_CLOUD_FIELDS
            if getattr(template, field) != getattr(default, field)
        ]
    return tuple(given)


def public_methods(cls: type) -> tuple[str, ...]:
    """The callable public methods a class endpoint exposes, in definition order."""
    return tuple(attr for attr, value in vars(cls).items() if not attr.startswith("_") and inspect.isfunction(value))


#: the key of the pickled table a worker of a shared endpoint loads: ``{TARGETS_KEY: {target name: "module:qualname"
#: or the function/class itself}}``
TARGETS_KEY = "flashpoint.targets"


def options_of(spec: EndpointSpec) -> EndpointSpec:
    """The spec without what differs between the functions and classes sharing one endpoint name (kind, methods):
    two declarations with one name form one endpoint when these agree."""
    if spec.kind == "command":
        return spec
    return dataclasses.replace(spec, kind="function", methods=())


def target_name(obj: Any) -> str:
    """The name a job uses to call one of the functions or classes of a shared endpoint: its ``__name__``."""
    return str(getattr(obj, "__name__", type(obj).__name__))


def worker_target_for_all(objs: Sequence[Any]) -> WorkerTarget:
    """How a worker runs an endpoint serving ``objs`` (functions and classes declared with one name): one of them as
    :func:`worker_target_for`; several as a pickled table of import paths (importable ones) and pickled code."""
    if len(objs) == 1:
        return worker_target_for(objs[0])
    from flashpoint.wire.pickling import dumps_code

    table: dict[str, Any] = {}
    for obj in objs:
        target = worker_target_for(obj)
        table[target_name(obj)] = target.import_path if target.import_path is not None else obj
    return WorkerTarget(pickled=dumps_code({TARGETS_KEY: table}))


def worker_target_for(obj: Any) -> WorkerTarget:
    """Import by path when the worker can import the defining module; otherwise ship the code with cloudpickle."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module and module != "__main__" and "<locals>" not in qualname:
        return WorkerTarget(import_path=f"{module}:{qualname}")
    from flashpoint.wire.pickling import dumps_code

    return WorkerTarget(pickled=dumps_code(obj))
