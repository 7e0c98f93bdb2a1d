"""Settings: ``FLASHPOINT_*`` environment variables over defaults, resolved once into a frozen dataclass."""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flashpoint.errors import ConfigError
from flashpoint.flashtypes import cuda_tuple

#: the worker backends FLASHPOINT_BACKEND and ``serve --backend`` accept
BACKENDS = ("local", "ray")
#: the driver CUDA version simulated devices report unless FLASHPOINT_SIMULATED_CUDA says otherwise (Flash's default
#: min_cuda_version, so a simulated fleet passes what Flash's own default would ask)
DEFAULT_SIMULATED_CUDA = "12.8"
#: FLASHPOINT_ENV_BUILD_TIMEOUT_S's default: 20 minutes, room for a CUDA wheel set (torch and its nvidia-* wheels are
#: gigabytes) on a slow link, yet a bound on an index that accepts a connection and never answers
DEFAULT_ENV_BUILD_TIMEOUT_S = 1200.0
#: a label value as Ray (and Kubernetes) accept it
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, with its default. Build with ``Settings.load(env)``; tests pass a dict."""

    #: FLASHPOINT_SIMULATED_GPUS: simulated devices instead of NVML discovery: "MODEL:COUNT,..." (this node),
    #: "NODE=MODEL:COUNT,...;..." (several nodes) or "@fleet.toml" (a fleet file); see flashpoint.fleet.simulated
    simulated_gpus: str | None = None
    #: FLASHPOINT_URL: a flashpoint server to send calls to, instead of an embedded control plane
    url: str | None = None
    #: FLASHPOINT_API_KEY
    api_key: str | None = None
    #: FLASHPOINT_NODE: this machine's node name in placements (default: the host name)
    node: str = "local"
    #: FLASHPOINT_TAKE_HOLD_S: how long a worker's job-take long-poll is held before an empty answer
    take_hold_s: float = 20.0
    #: FLASHPOINT_STATE_DIR: where embedded planes announce themselves to `flashpoint explain`
    state_dir: Path = Path("~/.flashpoint").expanduser()
    #: FLASHPOINT_WEBHOOK_RETRY_S: seconds between webhook attempts (Runpod: 10)
    webhook_retry_s: float = 10.0
    #: FLASHPOINT_BACKEND: where workers run: "local" (subprocesses of this machine) or "ray" (actors on a Ray cluster)
    backend: str = "local"
    #: FLASHPOINT_RAY_ADDRESS: the Ray cluster to join (host:port of the head, or "auto"); unset starts Ray here
    ray_address: str | None = None
    #: FLASHPOINT_RAY_READY_TIMEOUT_S: how long a worker's Ray actor may take to start before the next candidate
    ray_ready_timeout_s: float = 60.0
    #: FLASHPOINT_WORKER_URL: the control plane's URL as workers on other nodes reach it, e.g. http://10.0.0.5:8000
    worker_url: str | None = None
    #: FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS: 1 lets webhooks reach loopback, private and other non-public addresses
    allow_private_webhooks: bool = False
    #: FLASHPOINT_CPUS: the logical CPUs CPU workers may reserve on this machine (default: the CPUs it may run on)
    cpus: int | None = None
    #: FLASHPOINT_MEMORY_GB: the memory CPU workers may reserve on this machine, in GB (default: its physical memory)
    memory_gb: float | None = None
    #: FLASHPOINT_DATACENTER: this machine's datacenter label, matched by ``datacenter=`` (default: none)
    datacenter: str | None = None
    #: FLASHPOINT_SIMULATED_CUDA: the driver CUDA version of simulated nodes, checked by ``min_cuda_version``
    simulated_cuda: str = DEFAULT_SIMULATED_CUDA
    #: FLASHPOINT_ROUTE_WAIT_S: how long a request to an HTTP-route endpoint waits for a ready worker (a cold start
    #: included) before the server answers 503 with the endpoint's explanation (``serve --route-wait-s``)
    route_wait_s: float = 60.0
    #: FLASHPOINT_ROUTE_READY_TIMEOUT_S: how long a route worker may take to answer ``GET /ping`` with 200 before it
    #: counts as a failed start
    route_ready_timeout_s: float = 600.0
    #: FLASHPOINT_PREEMPT_GRACE_S: how long a preempted worker has to stop before it is killed (decision 0115)
    preempt_grace_s: float = 30.0
    #: FLASHPOINT_GPU_SAMPLE_S: seconds between two NVML samples of this node's real GPUs (telemetry, decision
    #: 0117); 0 turns sampling off, and less than 1 s is refused
    gpu_sample_s: float = 5.0
    #: FLASHPOINT_IDLE_TIMEOUT: ``auto`` sizes the keep-warm window of every endpoint that sets no ``idle_timeout``
    #: from its traffic (``idle_timeout="auto"``); unset (or ``60``): Flash's fixed 60 s (decision 0119)
    idle_timeout_auto: bool = False
    #: FLASHPOINT_DASHBOARD: 0 turns the embedded server's web dashboard off (its page at ``/`` and the line on stderr
    #: that names its URL); ``flashpoint serve`` always serves it
    dashboard: bool = True
    #: FLASHPOINT_ENV_BUILD_TIMEOUT_S: the most seconds the installation of an endpoint's ``dependencies`` may take:
    #: a local build (all its uv steps together) is stopped and fails past it, and it is Ray's ``runtime_env`` setup
    #: timeout on the Ray backend
    env_build_timeout_s: float = DEFAULT_ENV_BUILD_TIMEOUT_S

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        hold = env.get("FLASHPOINT_TAKE_HOLD_S", "20")
        try:
            take_hold_s = float(hold)
        except ValueError:
            raise ConfigError(f"FLASHPOINT_TAKE_HOLD_S must be seconds, e.g. 20; got {hold!r}") from None
        if not 0 < take_hold_s < 90:
            raise ConfigError(f"FLASHPOINT_TAKE_HOLD_S must be between 0 and 90 (workers give up at 90 s); got {hold}")
        backend = (env.get("FLASHPOINT_BACKEND") or "local").strip().lower()
        if backend not in BACKENDS:
            raise ConfigError(f"FLASHPOINT_BACKEND must be one of {', '.join(BACKENDS)}; got {backend!r}")
        worker_url = (env.get("FLASHPOINT_WORKER_URL") or "").rstrip("/") or None
        if worker_url is not None and not worker_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"FLASHPOINT_WORKER_URL must be an http:// URL, e.g. http://10.0.0.5:8000; got {worker_url!r}"
            )
        return cls(
            simulated_gpus=env.get("FLASHPOINT_SIMULATED_GPUS") or None,
            url=env.get("FLASHPOINT_URL") or None,
            api_key=env.get("FLASHPOINT_API_KEY") or None,
            node=env.get("FLASHPOINT_NODE") or socket.gethostname() or "local",
            take_hold_s=take_hold_s,
            state_dir=Path(env.get("FLASHPOINT_STATE_DIR") or "~/.flashpoint").expanduser(),
            webhook_retry_s=_seconds(env, "FLASHPOINT_WEBHOOK_RETRY_S", 10.0),
            backend=backend,
            ray_address=env.get("FLASHPOINT_RAY_ADDRESS") or None,
            ray_ready_timeout_s=_seconds(env, "FLASHPOINT_RAY_READY_TIMEOUT_S", 60.0),
            worker_url=worker_url,
            allow_private_webhooks=_flag(env, "FLASHPOINT_ALLOW_PRIVATE_WEBHOOKS"),
            cpus=_cpus(env),
            memory_gb=_memory_gb(env),
            datacenter=_datacenter(env),
            simulated_cuda=_cuda(env),
            route_wait_s=_seconds(env, "FLASHPOINT_ROUTE_WAIT_S", 60.0),
            route_ready_timeout_s=_seconds(env, "FLASHPOINT_ROUTE_READY_TIMEOUT_S", 600.0),
            preempt_grace_s=_seconds(env, "FLASHPOINT_PREEMPT_GRACE_S", 30.0),
            gpu_sample_s=_gpu_sample_s(env),
            idle_timeout_auto=_idle_timeout_auto(env),
            dashboard=_flag(env, "FLASHPOINT_DASHBOARD") if (env.get("FLASHPOINT_DASHBOARD") or "").strip() else True,
            env_build_timeout_s=env_build_timeout_s(env),
        )


def env_build_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """FLASHPOINT_ENV_BUILD_TIMEOUT_S from ``env`` (default: this process's environment), checked.

    Also read on its own, by an environment cache made without a limit (``EnvironmentCache(build_timeout_s=None)``,
    the plane's default cache): the plane is not handed its settings, so the variable is the one knob for both.
    """
    env = os.environ if env is None else env
    value = _seconds(env, "FLASHPOINT_ENV_BUILD_TIMEOUT_S", DEFAULT_ENV_BUILD_TIMEOUT_S)
    if not 0 < value < math.inf:  # 0 would stop every build at once; nan and inf are no limit a timer can keep
        raise ConfigError(
            "FLASHPOINT_ENV_BUILD_TIMEOUT_S must be a number of seconds more than 0, e.g. "
            f"{DEFAULT_ENV_BUILD_TIMEOUT_S:g}; got {env.get('FLASHPOINT_ENV_BUILD_TIMEOUT_S')!r}"
        )
    return value


def _idle_timeout_auto(env: Mapping[str, str]) -> bool:
    text = (env.get("FLASHPOINT_IDLE_TIMEOUT") or "").strip().lower()
    if text in ("", "60"):
        return False
    if text == "auto":
        return True
    given = env.get("FLASHPOINT_IDLE_TIMEOUT")
    raise ConfigError(f"FLASHPOINT_IDLE_TIMEOUT must be 'auto' (size keep-warm from traffic) or unset; got {given!r}")


def _flag(env: Mapping[str, str], name: str) -> bool:
    text = (env.get(name) or "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be 1 or 0; got {env.get(name)!r}")


def _gpu_sample_s(env: Mapping[str, str]) -> float:
    value = _seconds(env, "FLASHPOINT_GPU_SAMPLE_S", 5.0)
    if 0 < value < 1:
        raise ConfigError(f"FLASHPOINT_GPU_SAMPLE_S must be at least 1 second (or 0: no GPU telemetry); got {value:g}")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, e.g. {default:g}; got {text!r}") from None
    if value < 0:
        raise ConfigError(f"{name} must not be negative; got {text}")
    return value


def _cpus(env: Mapping[str, str]) -> int | None:
    text = (env.get("FLASHPOINT_CPUS") or "").strip()
    if not text:
        return None
    if not re.fullmatch(r"[0-9]+", text):
        raise ConfigError(
            f"FLASHPOINT_CPUS must be a whole number of logical CPUs that CPU workers may reserve, e.g. 8; got {text!r}"
        )
    return int(text)


def _memory_gb(env: Mapping[str, str]) -> float | None:
    text = (env.get("FLASHPOINT_MEMORY_GB") or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"FLASHPOINT_MEMORY_GB must be the GB of memory CPU workers may reserve, e.g. 16 or 15.5; got {text!r}"
        )
    return value


def _datacenter(env: Mapping[str, str]) -> str | None:
    text = (env.get("FLASHPOINT_DATACENTER") or "").strip()
    if not text:
        return None
    if not _LABEL.fullmatch(text):
        raise ConfigError(
            "FLASHPOINT_DATACENTER must be a label: letters, digits, '.', '_' or '-' (at most 63, starting and ending "
            f"with a letter or digit), e.g. EU-RO-1; got {text!r}"
        )
    return text


def _cuda(env: Mapping[str, str]) -> str:
    text = (env.get("FLASHPOINT_SIMULATED_CUDA") or "").strip()
    if not text:
        return DEFAULT_SIMULATED_CUDA
    try:
        cuda_tuple(text)
    except ValueError:
        raise ConfigError(f"FLASHPOINT_SIMULATED_CUDA must be a CUDA version, e.g. 12.8; got {text!r}") from None
    return text
