"""Ray backend: workers are Ray actors on the nodes of a Ray cluster.

Each actor runs the same worker process the local backend runs, on its node, and that process pulls jobs from the
control plane over HTTP with the one worker protocol. Ray is the engine that puts a process on a node; flashpoint keeps
the fleet ledger, the declared fallback order and the explanations, because Ray knows GPU models only coarsely
(every A100 is "A100"), leaves an impossible request pending without a word, and stalls in its own fallback.

The fleet comes from ``ray.nodes()``: a node's exact GPU model is its ``gpu-model`` label (the NVML name with spaces
as hyphens, printed by ``flashpoint ray-flags``); without one, Ray's coarse accelerator type stands in and is marked
``coarse``. Every live node is a node of the fleet, with or without GPUs: its ``CPU`` and ``memory`` resources are
what CPU workers may reserve there, its ``datacenter`` label is matched by ``datacenter=``, and its ``cuda-version``
label (also printed by ``flashpoint ray-flags``) by ``min_cuda_version``. Ray is imported only inside functions here,
so ``import flashpoint`` never loads it. The labels and the reading of ``ray.nodes()`` are ``raynodes.py`` (pure);
what a worker takes to a node that shares no filesystem with the plane (its environment, its code) is
``rayship.py``; a node that stopped answering (set aside at once), an actor's death and a cluster that wants a token,
in true words, are ``rayhealth.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from flashpoint.backends import process, rayhealth, rayship, raytoken
from flashpoint.backends.base import ExitCallback, FleetCallback, Launch, LineCallback, Started, address, http_env
from flashpoint.backends.raynodes import (
    CUDA_LABEL,
    GPU_MODEL_LABEL,
    NODE_ID_LABEL,
    SIMULATED_LABEL,
    devices_from_nodes,
    node_labels,
    node_name,
    nodes_from_ray,
    start_flags,
)
from flashpoint.backends.rayship import EnvironmentSetupError
from flashpoint.errors import BackendError, ConfigError, NotReadyError
from flashpoint.fleet.inventory import Device, Fleet, Node

__all__ = [
    "CUDA_LABEL",
    "GPU_MODEL_LABEL",
    "SIMULATED_LABEL",
    "RayBackend",
    "devices_from_nodes",
    "node_labels",
    "nodes_from_ray",
    "quiet_ray",
    "start_flags",
]

log = logging.getLogger("flashpoint.backends.ray")

_MIB = 1024 * 1024
#: set before Ray starts, unless the user set them: nothing leaves the machine
NO_PHONE_HOME: Mapping[str, str] = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


def quiet_ray() -> None:
    """Turn Ray's usage reporting off (unless the user set those variables); call before Ray starts or connects."""
    for name, value in NO_PHONE_HOME.items():
        os.environ.setdefault(name, value)


# ----------------------------------------------------------------------------------------------------------------------
# the actor: one per worker, on the worker's node


class WorkerHost:
    """A Ray actor that runs one worker process on its node and hands its output lines back on request.

    The process is wrapped in ``flashpoint.worker.launch``, so it dies with the actor (and with the node).
    """

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._lines: deque[tuple[str, str]] = deque()
        self._changed = asyncio.Event()
        self._code: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._code_dir: str | None = None

    async def start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        plane_python: str,
        http: bool = False,
        code: bytes | None = None,
        working_dir: bool = False,
    ) -> tuple[list[str], str | None]:
        """Start the worker process; the GPU ids Ray gave this actor (and so the worker), and a route worker's
        address: a free port on this node's address, which the control plane's proxy connects to.

        ``code``: the bytes of the plane's code file, written to a private file here in its place. ``working_dir``:
        the app's folder is this actor's working directory (Ray unpacked it), which the worker runs in and imports
        from. The plane's interpreter in the command means this actor's: the runtime_env's, when it has one.
        """
        import ray

        unpacked = rayship.unpack(argv, env, cwd, plane_python=plane_python, code=code, working_dir=working_dir)
        self._code_dir = unpacked.code_dir
        node_id = ray.get_runtime_context().get_node_id()
        # Ray set CUDA_VISIBLE_DEVICES for this actor to the GPUs it gave it, numbered as the node's raylet sees them
        # (which honours a CUDA_VISIBLE_DEVICES the node was started with): the worker keeps those, not the ledger's
        plane_env = {k: v for k, v in unpacked.env.items() if k != "CUDA_VISIBLE_DEVICES"}
        full_env = {
            **os.environ,
            **plane_env,
            "FLASHPOINT_PARENT_PID": str(os.getpid()),
            "FLASHPOINT_RAY_NODE_ID": node_id,
        }
        where = None
        if http:
            node_ip: Any = ray.util.get_node_ip_address  # untyped in Ray
            host = str(node_ip())
            port = process.free_port(host)
            full_env.update(http_env(host, port))
            where = address(host, port)
        wrapped = [sys.executable, "-m", "flashpoint.worker.launch", "--parent", str(os.getpid()), "--", *unpacked.argv]
        try:
            self._proc = await process.spawn(wrapped, full_env, unpacked.cwd)
        except BaseException:
            rayship.remove_code(self._code_dir)
            raise
        self._task = asyncio.create_task(self._run(self._proc))
        return [str(i) for i in ray.get_gpu_ids()], where

    async def _run(self, proc: asyncio.subprocess.Process) -> None:
        self._code = await process.watch(proc, self._add)
        rayship.remove_code(self._code_dir)  # the worker read its code at start; nothing else may
        self._changed.set()

    def _add(self, channel: str, line: str) -> None:
        self._lines.append((channel, line))
        self._changed.set()

    async def output(self, wait_s: float) -> tuple[list[tuple[str, str]], int | None]:
        """New output lines, waiting up to ``wait_s`` for some; plus the exit code once the process is gone."""
        if not self._lines and self._code is None:
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait_s)
        lines = list(self._lines)
        self._lines.clear()
        return lines, self._code

    async def stop(self, grace_s: float) -> None:
        if self._proc is not None:
            await process.terminate(self._proc, grace_s, "on Ray")
            if self._task is not None:
                await asyncio.wait([self._task], timeout=3)


# ----------------------------------------------------------------------------------------------------------------------
# the backend


class RayBackend:
    """Places each worker as a ``WorkerHost`` actor pinned to its node (and GPU model) with a label selector."""

    name = "ray"
    #: an endpoint's ``dependencies`` are installed by Ray on the worker's node (a ``pip`` runtime_env), so the plane
    #: builds no environment of its own for this backend's workers
    builds_environments = True

    def __init__(
        self,
        address: str | None,
        *,
        ready_timeout_s: float = 60.0,
        poll_s: float = 1.0,
        local_devices: Sequence[Device] = (),
        local_node: Node | None = None,
        env_setup_timeout_s: float = 600.0,
        ship_code: bool = True,
    ) -> None:
        """``address`` is a Ray cluster's (``ray://``, ``host:port`` or ``auto``); None starts a one-node Ray here,
        labelled from ``local_devices`` (this machine's NVML or simulated GPUs) and ``local_node`` (its CUDA version
        and datacenter; its logical CPUs become the node's).

        ``env_setup_timeout_s`` bounds the installation of an endpoint's ``dependencies`` on a node (Ray's
        ``setup_timeout_seconds``; the worker's start waits that plus ``ready_timeout_s``). ``ship_code`` False
        uploads no app folder: every node then needs the app at the plane's path (a shared filesystem or image).
        """
        self.address = address
        self.ready_timeout_s = ready_timeout_s
        self.env_setup_timeout_s = env_setup_timeout_s
        self.ship_code = ship_code
        self.poll_s = poll_s
        self._local = list(local_devices)
        self._local_node = local_node
        self._devices: list[Device] = []
        self._fleet_nodes: list[Node] = []
        self._nodes: dict[str, Mapping[str, Any]] = {}  # node name -> ray.nodes() entry
        self._first_seen: dict[str, int] = {}
        #: the last ``ray.nodes()`` answer, every node's entry by id
        self._by_id: dict[str, Mapping[str, Any]] = {}
        #: nodes set aside because their raylet stopped answering (or Ray said they died), until Ray lists them dead
        #: or their raylet answers again; and why nodes that just left are gone (``Fleet.away``)
        self._away = rayhealth.AwayNodes()
        self._gone: dict[str, str] = {}
        self._on_change: FleetCallback | None = None
        #: the Ray node id each worker's actor was pinned to
        self._worker_nodes: dict[str, str] = {}
        self._actors: dict[str, Any] = {}
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._host_class: Any = None
        self._started_ray = False
        self._closed = False
        #: actors whose start is in flight: close() kills them, and waits for their starts to give up
        self._starting: set[Any] = set()
        self._none_starting = asyncio.Event()
        self._none_starting.set()

    # -- fleet

    def connect(self) -> None:
        """Start or join Ray and read the fleet once. Blocking: call it before the plane starts (or in a thread)."""
        quiet_ray()
        import ray

        if not ray.is_initialized():
            if self.address:
                rayhealth.check_reachable(self.address)
                _check_token(self.address)
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "namespace": "flashpoint",
                "configure_logging": False,
            }
            quiet = _DropThreadWarning()
            logging.getLogger("ray._private.worker").addFilter(quiet)
            try:
                if self.address:
                    ray.init(address=self.address, **options)
                else:
                    here = self._local_node
                    labels = node_labels(self._local, here) if self._local or (here and here.datacenter) else None
                    if here is not None:
                        options["num_cpus"] = here.cpus
                    # Ray 2.59+ writes a token for it world-readable where none exists: written here first, 0600
                    raytoken.keep_private()
                    # "local": a new instance of our own, even where `ray start` left a cluster running on this machine
                    ray.init(address="local", num_gpus=len(self._local), labels=labels, **options)
            except ConfigError:
                raise
            except ray.exceptions.AuthenticationError:  # token mode, and no token found
                raise ConfigError(rayhealth.token_advice(self.address or "local", os.environ)) from None
            except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, ...
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
                raise BackendError(
                    f"cannot start or join {where}: {exc}. Check FLASHPOINT_RAY_ADDRESS (or --ray-address): "
                    "the head node's host:port, as `ray start --head` printed it, or 'auto' on a cluster node"
                ) from exc
            finally:
                logging.getLogger("ray._private.worker").removeFilter(quiet)
            self._started_ray = True
        self._read_fleet(ray.nodes())  # type: ignore[no-untyped-call]

    def _read_fleet(self, nodes: Sequence[Mapping[str, Any]]) -> bool:
        """Take a ``ray.nodes()`` answer; True when the devices changed. Nodes keep the order they first joined in;
        nodes set aside are left out, until Ray lists them dead (then they are gone) or they answer again."""
        for node in nodes:
            self._first_seen.setdefault(str(node["NodeID"]), len(self._first_seen))
        self._by_id = {str(n["NodeID"]): n for n in nodes}
        self._away.settle(i for i, n in self._by_id.items() if n.get("Alive"))
        alive = [n for n in nodes if n.get("Alive") and str(n["NodeID"]) not in self._away]
        live = sorted(alive, key=lambda n: self._first_seen[str(n["NodeID"])])
        dead = [n for n in nodes if not n.get("Alive") and node_name(n) in self._nodes]  # since the last reading
        self._gone = {**{node_name(n): rayhealth.declared_dead(n) for n in dead}, **dict(self._away.reasons())}
        self._nodes = {node_name(n): n for n in live}
        devices = devices_from_nodes(live)
        fleet_nodes = nodes_from_ray(live)
        changed = devices != self._devices or fleet_nodes != self._fleet_nodes
        self._devices = devices
        self._fleet_nodes = fleet_nodes
        return changed

    def devices(self) -> list[Device]:
        return list(self._devices)

    def nodes(self) -> list[Node]:
        return list(self._fleet_nodes)

    def watch(self, on_change: FleetCallback) -> None:
        self._on_change = on_change
        self._poller = asyncio.get_running_loop().create_task(self._poll(on_change))

    def _fleet(self) -> Fleet:
        return Fleet.of(self._devices, self._fleet_nodes, self._gone.items())

    async def _poll(self, on_change: FleetCallback) -> None:
        import ray

        while True:
            await asyncio.sleep(self.poll_s)
            try:
                nodes = await asyncio.to_thread(ray.nodes)
            except Exception as exc:  # the GCS may be restarting: keep the last fleet and ask again
                log.warning("cannot read the Ray cluster's nodes: %s", exc)
                continue
            await self._probe_away(nodes)
            if self._read_fleet(nodes):
                on_change(self._fleet())

    async def _probe_away(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Nodes set aside that Ray still lists alive and whose raylet answers again are back."""
        alive = {str(n["NodeID"]) for n in nodes if n.get("Alive")}
        probed = [(node_id, away) for node_id, away in self._away.items() if node_id in alive]
        answers = await asyncio.gather(
            *(asyncio.to_thread(rayhealth.raylet_answers, away.host, away.port) for _, away in probed)
        )
        for (node_id, away), answers_now in zip(probed, answers, strict=True):
            if answers_now:
                self._away.back(node_id)
                log.warning("Ray node %s answers again: placing workers there again", away.name)

    async def _node_lost(self, node_id: str | None, error: str) -> str | None:
        """Whether a worker's actor was lost with its node, and if so why, in words (the node is then set aside at
        once, and the plane hears of the fleet without it): Ray says the node died, or Ray lists it alive but its
        raylet does not answer. None when the node is fine, so only the actor died."""
        entry = self._by_id.get(node_id or "")
        if node_id is None or entry is None or self._closed:  # closing kills the actors: no node is to blame
            return None
        name = node_name(entry)
        known = self._away.get(node_id)
        if known is not None:  # another of its actors told already
            return f"its Ray node {name} is away ({known.why})"
        host, port = str(entry.get("NodeManagerAddress") or ""), int(entry.get("NodeManagerPort") or 0)
        if rayhealth.node_died(error) or not entry.get("Alive"):
            why = f"Ray says it died ({rayhealth.death_cause(error)})"
        elif host and port and not await asyncio.to_thread(rayhealth.raylet_answers, host, port):
            why = f"its raylet at {address(host, port)} stopped answering"
        else:
            return None
        if self._away.mark(node_id, rayhealth.Away(name, why, host, port)):
            log.warning("Ray node %s is away (%s): its devices are set aside until it answers again", name, why)
            if self._read_fleet(list(self._by_id.values())) and self._on_change is not None:
                self._on_change(self._fleet())
        return f"its Ray node {name} is away ({why})"

    # -- workers

    def _selector(self, where: str, gpus: bool) -> dict[str, str]:
        node = self._nodes.get(where)
        if node is None:
            raise NotReadyError(f"node {where} has left the Ray cluster")
        selector = {NODE_ID_LABEL: str(node["NodeID"])}
        label = (node.get("Labels") or {}).get(GPU_MODEL_LABEL)
        if label and gpus:
            selector[GPU_MODEL_LABEL] = str(label)
        return selector

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        import ray

        if self._closed or not ray.is_initialized():  # Ray calls would start (or join) a Ray of their own
            raise BackendError(f"worker {launch.worker_id}: the Ray backend is closed")
        # the code and environment the worker takes to its node: an upload of the app's folder may take a while
        upload = _upload if self.ship_code else None
        shipment = await asyncio.to_thread(
            rayship.pack, launch.argv, launch.env, setup_timeout_s=self.env_setup_timeout_s, upload=upload
        )
        if self._closed or not ray.is_initialized():
            raise BackendError(f"worker {launch.worker_id}: the Ray backend is closed")
        # a CPU worker reserves its instance's CPUs and memory in Ray too, so Ray's accounting is the ledger's
        options: dict[str, Any] = {"num_cpus": launch.cpus, "num_gpus": len(launch.devices), "max_restarts": 0}
        if launch.memory_mb:
            options["memory"] = launch.memory_mb * _MIB
        if shipment.runtime_env is not None:
            options["runtime_env"] = shipment.runtime_env
        where = launch.devices[0].node if launch.devices else launch.node
        node_id: str | None = None
        if where:
            options["label_selector"] = self._selector(where, bool(launch.devices))
            node_id = options["label_selector"][NODE_ID_LABEL]
        if self._host_class is None:
            self._host_class = ray.remote(WorkerHost)
        actor = self._host_class.options(**options).remote()
        self._starting.add(actor)
        self._none_starting.clear()
        # installing dependencies on the node comes before the actor exists: the wait allows for it
        wait_s = self.ready_timeout_s + (self.env_setup_timeout_s if shipment.requirements else 0.0)
        try:
            gpu_ids, where_http = await asyncio.wait_for(
                actor.start.remote(
                    list(launch.argv),
                    shipment.env,
                    launch.cwd,
                    sys.executable,
                    launch.http,
                    shipment.code,
                    shipment.app_root is not None,
                ),
                wait_s,
            )
        except asyncio.TimeoutError:
            _kill(actor)
            where = where or "any node"
            if shipment.requirements:  # Ray does not say whether it was still installing or still placing
                raise EnvironmentSetupError(
                    f"worker {launch.worker_id}: Ray did not start its actor on {where} within {wait_s:g}s, "
                    f"{_setting_up(shipment)} included (setup_timeout_seconds="
                    f"{self.env_setup_timeout_s:g}): the installation may be too slow for that, or the node gone",
                    requirements=shipment.requirements,
                ) from None
            raise NotReadyError(
                f"worker {launch.worker_id}: Ray did not start its actor on {where} within {self.ready_timeout_s:g}s "
                "(the node may be gone, or its GPUs in use outside flashpoint)"
            ) from None
        except ray.exceptions.RuntimeEnvSetupError as exc:  # the installer failed (Ray tried a few times on the node)
            _kill(actor)
            installer = rayship.installer_error(str(exc))
            raise EnvironmentSetupError(
                f"worker {launch.worker_id}: Ray could not set up its environment on {where or 'its node'} "
                f"({_setting_up(shipment)}):\n{installer}",
                requirements=shipment.requirements,
                installer=installer,
            ) from exc
        except ray.exceptions.ActorUnschedulableError as exc:  # the node left, or cannot hold the request any more
            _kill(actor)
            raise NotReadyError(f"worker {launch.worker_id}: Ray cannot place it there: {_short(exc)}") from exc
        except Exception as exc:  # the actor died in its constructor, the command could not start, or close() came
            _kill(actor)
            lost = await self._node_lost(node_id, str(exc))
            if lost is not None:  # its node went away, not the worker: no failed start
                raise NotReadyError(f"worker {launch.worker_id}: {lost}") from exc
            raise BackendError(f"worker {launch.worker_id}: {_short(exc)}") from exc
        finally:
            self._starting.discard(actor)
            if not self._starting:
                self._none_starting.set()
        if self._closed:
            _kill(actor)
            raise BackendError(f"worker {launch.worker_id}: the Ray backend is closed")
        self._actors[launch.worker_id] = actor
        if node_id is not None:
            self._worker_nodes[launch.worker_id] = node_id
        self._pumps[launch.worker_id] = asyncio.create_task(self._pump(launch.worker_id, actor, on_line, on_exit))
        ids = tuple(int(i) for i in gpu_ids) if all(i.isdigit() for i in gpu_ids) else None
        return Started(device_ids=ids, address=where_http)

    async def _pump(self, worker_id: str, actor: Any, on_line: LineCallback, on_exit: ExitCallback) -> None:
        code, cause = -1, ""
        try:
            while True:
                lines, exited = await actor.output.remote(1.0)
                for channel, line in lines:
                    on_line(worker_id, channel, line)
                if exited is not None:
                    code = exited
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # RayActorError and friends: the actor, or its whole node, is gone
            self._actors.pop(worker_id, None)  # nothing to ask it to stop
            error = str(exc)
            node = await self._node_lost(self._worker_nodes.get(worker_id), error)
            cause = node or f"its Ray actor is gone ({type(exc).__name__}: {rayhealth.death_cause(error)})"
            on_line(worker_id, "stderr", f"flashpoint: worker {worker_id} is gone: {cause}")
        finally:
            self._actors.pop(worker_id, None)
            self._pumps.pop(worker_id, None)
            self._worker_nodes.pop(worker_id, None)
            _kill(actor)
        if cause:  # no exit status: the process was lost from sight, not seen to end
            on_exit(worker_id, code, cause)
        else:
            on_exit(worker_id, code)

    async def stop(self, worker_id: str, grace_s: float) -> None:
        actor = self._actors.get(worker_id)
        if actor is None:
            return
        try:
            await asyncio.wait_for(actor.stop.remote(grace_s), grace_s + 5.0)
        except asyncio.TimeoutError:  # unreachable actor: end it from here; its pump reports the exit
            log.warning("worker %s did not stop on Ray within %.0fs; killing its actor", worker_id, grace_s + 5.0)
            _kill(actor)
        except Exception as exc:  # the actor is already gone (its process exited first): its pump reports it
            log.debug("worker %s: its actor ended while stopping (%s)", worker_id, _short(exc))

    async def close(self) -> None:
        import ray

        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
        if not ray.is_initialized():  # Ray's own exit hook ran first: its actors went with it
            return
        for actor in list(self._starting):  # starts in flight give up at once
            _kill(actor)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._none_starting.wait(), 10)
        await asyncio.gather(*(self.stop(w, 5.0) for w in list(self._actors)), return_exceptions=True)
        pumps = list(self._pumps.values())
        if pumps:
            await asyncio.wait(pumps, timeout=10)
        if self._started_ray:
            self._started_ray = False
            await asyncio.to_thread(ray.shutdown)


class _DropThreadWarning(logging.Filter):
    """The embedded plane joins Ray from its own thread, where Ray warns that it cannot set a SIGTERM handler. The
    plane stops its workers itself, so the warning says nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _check_token(address: str) -> None:
    """Fail at once, saying how to give the token, when the cluster uses Ray's token authentication and this process
    sends none or another (``ray.init`` retries for 20 s, then says only "Failed to connect", which reads as a wrong
    address). A GCS client of Ray's own sends the token as Ray would; anything but a refusal is left to ``ray.init``."""
    if address == "auto" or "://" in address:  # Ray authenticates to a cluster it finds itself; ray:// is Ray Client
        return
    import ray._raylet

    gcs_client: Any = getattr(ray._raylet, "InnerGcsClient", None)  # compiled, and untyped in Ray's stubs
    AuthenticationError: Any = getattr(ray.exceptions, "AuthenticationError", None)
    if gcs_client is None or AuthenticationError is None:  # pragma: no cover - a Ray without token authentication
        return
    try:
        gcs_client.standalone(address, None, 5000)
    except AuthenticationError:
        raise ConfigError(rayhealth.token_advice(address, os.environ)) from None
    except Exception as exc:  # not a refusal: ray.init tells what it is
        log.debug("the Ray cluster at %s did not answer a GCS client (%s); ray.init will say why", address, exc)


def _upload(directory: str) -> str:
    """Pack ``directory`` into the cluster (unless a package of the same content is there) and return its
    ``gcs://`` URI for a ``working_dir``. Ray takes a local folder as ``working_dir`` for a whole job only
    (``ray.init``), not per actor; this is the step it runs for a job, through its packaging module (not a public
    API: a Ray without it is reported as such)."""
    try:
        from ray._private.runtime_env import packaging
    except ImportError as exc:  # pragma: no cover - depends on the installed Ray
        raise BackendError(f"this Ray cannot ship an app's folder ({exc}); install the app on every node") from exc
    include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"  # as Ray does for a job
    excludes = list(rayship.EXCLUDES)
    uri = str(packaging.get_uri_for_directory(directory, include_gitignore=include_gitignore, excludes=excludes))
    with tempfile.TemporaryDirectory(prefix="flashpoint-ship-") as scratch:
        packaging.upload_package_if_needed(
            uri, scratch, directory, include_gitignore=include_gitignore, excludes=excludes, logger=log
        )
    return uri


def _setting_up(shipment: rayship.Shipment) -> str:
    """What Ray was setting up for a worker, in words."""
    steps = [f"pip install {' '.join(shipment.requirements)}"] if shipment.requirements else []
    if shipment.app_root is not None:
        steps.append(f"the app's folder {shipment.app_root}")
    return " and ".join(steps) or "its runtime_env"


def _kill(actor: Any) -> None:
    """End an actor, unless Ray is already shut down (``ray.kill`` would start a Ray of its own to do it)."""
    import ray

    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.kill(actor)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
