"""What a worker is started with, and starting and stopping it through the backend (``Supervisor``): its command
(the endpoint's target, on its environment's interpreter), its environment (the plane's, less the plane's own keys,
with the endpoint's secrets (its app's, else the server's) expanded at each launch, its devices, its credentials, its
app), and the tasks that carry starts and stops out. ``WorkerSupervision`` (``supervision.py``) owns one and hears
what it reports.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from flashpoint.backends.base import Backend, Launch, LineCallback
from flashpoint.errors import BackendError, NotReadyError
from flashpoint.fleet import volumes
from flashpoint.fleet.inventory import Node
from flashpoint.scheduler.credentials import caller_credential, route_credential
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.spec import EndpointSpec, MissingSecretsError, SecretResolver, expand_env, missing_secrets
from flashpoint.wire import protocol

log = logging.getLogger("flashpoint.plane")

#: the code of a backend's error saying it could not set a worker's environment up (``rayship.EnvironmentSetupError``)
ENVIRONMENT_SETUP_FAILED = "environment_setup_failed"
#: variables of the plane's own environment a worker does not inherit: the server's API keys would open everything
#: to any endpoint's code (a worker calls the plane with its own narrow caller key); an endpoint's ``env`` may still
#: set them on purpose
PLANE_CREDENTIALS = ("FLASHPOINT_API_KEY", "FLASHPOINT_URL")


#: what a control plane is given to read secrets: the resolver of an app's endpoints (None: of endpoints outside any
#: app), asked with ``spec.app`` at each check and launch; ``SecretStore.resolver`` is one (decision 0103)
AppSecrets = Callable[[str | None], SecretResolver]


#: where a plane with no secret store finds a secret's value: its own environment, ``RUNPOD_SECRET_<name>``
SECRET_VAR_PREFIX = "RUNPOD_SECRET_"


def environment_secret(name: str) -> str | None:
    """A secret's value in this process's environment, ``RUNPOD_SECRET_<name>`` (None when unset)."""
    return os.environ.get(SECRET_VAR_PREFIX + name)


def no_app_secrets(app: str | None) -> SecretResolver:
    """The secrets of a plane with no secret store (a script's embedded plane, ``flashpoint run``, ``dev``): each from
    the plane's own environment, ``RUNPOD_SECRET_<name>`` (decision 0108), whatever the app."""
    return environment_secret


def set_secret_hint(app: str | None) -> str:
    """What a refusal naming missing secrets of an endpoint of ``app`` tells its reader to do: the command that sets
    one for that app (``--app``), or server-wide for an endpoint of no app (``MissingSecretsError``'s own hint)."""
    if app is None:
        return ""
    return (
        f"set each for app {app!r} with `flashpoint secret set NAME --app {app}` (or server-wide, without --app; the "
        "value is read from stdin or a prompt; add `--data-dir DIR` while the server is not running), or drop it "
        "from the endpoint's env"
    )


def check_secrets(spec: EndpointSpec, secrets: AppSecrets | None) -> None:
    """Refuse an endpoint naming a secret the plane (its secrets ``secrets``, asked for the endpoint's app; None: it
    keeps none) has no value for, naming every one (MissingSecretsError)."""
    if secrets is None:
        missing = missing_secrets(spec.env, environment_secret)
        hint = (
            "this plane keeps no secrets: give it each in its environment as RUNPOD_SECRET_<name>, or serve the "
            "endpoint with `flashpoint serve` and set each there with `flashpoint secret set NAME`, or drop it from "
            "the endpoint's env"
        )
    else:
        missing, hint = missing_secrets(spec.env, secrets(spec.app)), set_secret_hint(spec.app)
    if missing:
        raise MissingSecretsError(spec.key, missing, hint=hint)


def app_env(spec: EndpointSpec) -> dict[str, str]:
    """What a deployed endpoint's worker is told of its app: Flash's ``FLASH_APP``/``FLASH_ENV``, flashpoint's
    ``FLASHPOINT_APP``/``FLASHPOINT_APP_ENV``, and what Runpod SDK 2.x's workers read (decision 0108):
    ``FLASH_RESOURCE_NAME`` (a ``.remote`` of the worker's own resource runs in place), ``FLASH_ENVIRONMENT`` (its
    sibling calls stay in its environment) and ``RUNPOD_MAX_CONCURRENCY``; nothing for an endpoint outside any app."""
    if spec.app is None:
        return {}
    env = spec.app_env or ""
    return {
        "FLASH_APP": spec.app,
        "FLASH_ENV": env,
        "FLASHPOINT_APP": spec.app,
        "FLASHPOINT_APP_ENV": env,
        "FLASH_RESOURCE_NAME": spec.name,
        "FLASH_ENVIRONMENT": env,
        "RUNPOD_MAX_CONCURRENCY": str(spec.max_concurrency),
    }


class Supervisor:
    """Starts and stops workers through a backend, and knows what each is started with."""

    def __init__(
        self,
        backend: Backend,
        *,
        python: str,
        worker_env: Mapping[str, str],
        parent_pid: int | None,
        base_url: str,
        ping_interval_s: float,
        max_result_bytes: int,
        credential: Callable[[str, str], str],
        on_line: LineCallback,
        on_exit: Callable[[str, int, bool | None, str], None],
        on_not_ready: Callable[[Worker, NotReadyError], None],
        on_serving: Callable[[Worker], None] = lambda worker: None,
        node_of: Callable[[str], Node | None] = lambda name: None,
        secrets: AppSecrets = no_app_secrets,
    ) -> None:
        self.backend = backend
        #: the values of the secrets endpoints name in their env, per app, read at each launch (a secret set since
        #: counts)
        self._secrets = secrets
        #: the fleet's node of that name (its datacenter label reaches the worker)
        self._node_of = node_of
        self.python = python
        self.worker_env = dict(worker_env)
        self.parent_pid = parent_pid
        self.base_url = base_url
        self.ping_interval_s = ping_interval_s
        self.max_result_bytes = max_result_bytes
        self._credential = credential
        self._on_line = on_line
        self._on_exit = on_exit
        self._on_not_ready = on_not_ready
        #: a route worker was started and told its address: the plane polls its readiness from now on
        self._on_serving = on_serving
        #: pickled code per endpoint, for targets with neither an import path nor a command
        self.code_files: dict[str, str] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def launch(self, ep: EndpointState, worker: Worker, code_file: str | None = None) -> Launch:
        """Everything the worker is started with; raises BackendError when it cannot be built. ``ep`` says what the
        worker runs: its endpoint's record, or a rollout's staged generation (``Staged.record``, with its
        ``code_file``)."""
        cpu = worker.cpu
        return Launch(
            worker.id,
            ep.spec.key,
            self.argv(ep, code_file),
            self.env(ep, worker),
            worker.devices,
            ep.target.cwd,
            node=worker.node,
            cpus=len(cpu.cores) if cpu is not None else 0,
            memory_mb=cpu.memory_mb if cpu is not None else 0,
            http=ep.spec.serves_routes,
        )

    def python_of(self, ep: EndpointState) -> str:
        """The interpreter the endpoint's workers run on: its environment's once built (``scheduler/envgate.py``),
        else the plane's."""
        environment = ep.environment.environment if ep.environment is not None else None
        return str(environment.python) if environment is not None else self.python

    def argv(self, ep: EndpointState, code_file: str | None = None) -> list[str]:
        """The worker's command: the target's own command (through the launcher), or flashpoint's worker importing
        the endpoint's code by path or loading its code file; a route endpoint's worker serves its routes over HTTP
        (``--routes``) instead of pulling jobs."""
        target = ep.target
        python = self.python_of(ep)
        if target.command is not None:
            command = list(target.command)
            if command[0] in ("python", "python3"):  # the plane's interpreter: the one flashpoint is installed in
                command[0] = python
            # the launcher pins the command to its cores, mounts its volume and (with a parent) ties it to the plane
            parent = [] if self.parent_pid is None else ["--parent", str(self.parent_pid)]
            return [python, "-m", "flashpoint.worker.launch", *parent, "--", *command]
        mode = ["--routes"] if ep.spec.serves_routes else []
        if target.import_path is not None:
            return [python, "-m", "flashpoint.worker", *mode, "--import", target.import_path]
        path = code_file or self.code_files.get(ep.spec.key)
        if path is None:
            raise BackendError(f"endpoint {ep.spec.key!r} has no code file; register it with a target")
        return [python, "-m", "flashpoint.worker", *mode, "--pickle", path]

    def env(self, ep: EndpointState, worker: Worker) -> dict[str, str]:
        name = ep.spec.key
        model = worker.placement().gpu_model
        env = dict(self.worker_env)
        for variable in PLANE_CREDENTIALS:  # the server's own keys never reach the code it runs
            env.pop(variable, None)
        try:  # the spec holds references only; the values exist in this launch's environment and nowhere else
            env.update(expand_env(ep.spec.env, self._secrets(ep.spec.app), endpoint=name))
        except MissingSecretsError as exc:  # deleted since the endpoint was registered: this start fails
            raise BackendError(str(exc)) from None
        environment = ep.environment.environment if ep.environment is not None else None
        if environment is not None and env.get("PYTHONPATH"):
            # PYTHONPATH comes before site-packages: the host's directories would beat the environment's pins (it
            # reaches them after its own, through its .pth)
            env["PYTHONPATH"] = os.pathsep.join(environment.pythonpath(env["PYTHONPATH"].split(os.pathsep)))
        if environment is not None:  # the worker holds its environment itself, for as long as it runs
            env["FLASHPOINT_ENV_INUSE"] = str(environment.in_use_path)
        if ep.spec.system_dependencies:
            env["FLASHPOINT_SYSTEM_DEPENDENCIES"] = json.dumps(list(ep.spec.system_dependencies))
        if ep.spec.volumes:
            root = volumes.app_root(volumes.volumes_root(), ep.spec.app, ep.spec.app_env)  # an app's own
            env.update(volumes.worker_env(ep.spec.volumes, root))
        node = self._node_of(worker.node)
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": ",".join(str(d.index) for d in worker.devices),
                # a CPU worker's cores (worker/isolation.py pins the process to those this machine has); GPU workers
                # reserve no CPUs and are not pinned
                "FLASHPOINT_CPU_CORES": ",".join(str(c) for c in worker.cpu.cores) if worker.cpu is not None else "",
                "FLASHPOINT_NODE_DATACENTER": (node.datacenter if node is not None else None) or "",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # NVML's order, which is the order device indices come from
                "FLASHPOINT_GPU_MODEL": model or "",
                "FLASHPOINT_GPU_SIMULATED": "1" if any(d.simulated for d in worker.devices) else "0",
                "FLASHPOINT_ENDPOINT": name,
                "FLASHPOINT_WORKER_ID": worker.id,
                "FLASHPOINT_MAX_CONCURRENCY": str(ep.spec.max_concurrency),
                protocol.SINGLE_USE_ENV: "1" if ep.spec.single_use else "0",  # one job, then it ends
                "FLASHPOINT_DEPENDENCIES": json.dumps(list(ep.spec.dependencies)),
                "FLASHPOINT_MAX_RESULT_BYTES": str(self.max_result_bytes),
                **app_env(ep.spec),
            }
        )
        key = self._credential(name, worker.id)
        env.update(
            protocol.worker_env(
                self.base_url,
                name,
                worker.id,
                gpu=(model or "cpu").replace(" ", "-"),
                key=key,
                ping_interval_s=self.ping_interval_s,
            )
        )
        # code in the worker calling another endpoint (a route awaiting a queue function) reaches the plane's client
        # routes here, with a key that opens only calls and the jobs this worker started (default_connection.py)
        env["FLASHPOINT_CALLER_URL"] = self.base_url
        env["FLASHPOINT_CALLER_KEY"] = caller_credential(key, name, worker.id)
        # a route worker answers only requests carrying its route secret, which the server's proxy sends (an inherited
        # or declared value never reaches a worker: a queue worker has none)
        env.pop(protocol.ROUTE_SECRET_ENV, None)
        if ep.spec.serves_routes:
            env[protocol.ROUTE_SECRET_ENV] = route_credential(key, name, worker.id)
        if self.parent_pid is not None:
            env["FLASHPOINT_PARENT_PID"] = str(self.parent_pid)
        return env

    def start(self, worker: Worker, launch: Launch) -> None:
        self._keep(self._start(worker, launch))

    async def _start(self, worker: Worker, launch: Launch) -> None:
        def on_exit(worker_id: str, code: int, /, cause: str = "") -> None:
            self._on_exit(worker_id, code, None, cause)

        try:
            started = await self.backend.start(launch, self._on_line, on_exit)
            if launch.http and started.address is None:
                raise BackendError(f"the {self.backend.name} backend gave route worker {worker.id} no address")
        except NotReadyError as exc:
            self._on_not_ready(worker, exc)
            return
        except BackendError as exc:
            worker.stderr_tail.append(str(exc))
            worker.environment_failed = exc.code == ENVIRONMENT_SETUP_FAILED
            self._on_exit(worker.id, -1, True, "it could not be started")
            return
        worker.device_ids = started.device_ids
        worker.address = started.address
        worker.pid = started.pid
        if launch.http:
            self._on_serving(worker)

    def stop(self, worker_id: str, grace_s: float) -> None:
        """Ask the worker to exit (SIGTERM), and force it after ``grace_s``; its exit is reported as any other."""
        self._keep(self.backend.stop(worker_id, grace_s))

    def _keep(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a worker start or stop failed", exc_info=task.exception())

    @property
    def pending(self) -> int:
        """Starts and stops still in flight."""
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until every start and stop asked for so far has run (tests; close)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop every worker, then wait (a bounded time) for starts and stops still in flight, which end with it."""
        await self.backend.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10.0)
