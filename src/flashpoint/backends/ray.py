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
so ``import flashpoint`` never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from flashpoint.backends import process
from flashpoint.backends.base import ExitCallback, FleetCallback, Launch, LineCallback, Started, address, http_env
from flashpoint.errors import BackendError, ConfigError, NotReadyError
from flashpoint.gpus import gpu_model_label, identify, identify_label
from flashpoint.scheduler.inventory import DATACENTER_LABEL, Device, Fleet, Node

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

#: the node label holding the exact GPU model, e.g. "NVIDIA-H200"
GPU_MODEL_LABEL = "gpu-model"
#: "1" on a node whose GPUs are simulated (declared with ``ray start --num-gpus``, no real device behind them)
SIMULATED_LABEL = "flashpoint-simulated"
#: the node label holding the driver's CUDA version, e.g. "12.8" (NVML's, or FLASHPOINT_SIMULATED_CUDA)
CUDA_LABEL = "cuda-version"
#: labels flashpoint reads for itself, not shown among a node's labels
_OWN_LABELS = frozenset({GPU_MODEL_LABEL, SIMULATED_LABEL, CUDA_LABEL})
_MIB = 1024 * 1024
_NODE_ID_LABEL = "ray.io/node-id"
_ACCELERATOR_LABEL = "ray.io/accelerator-type"
_ACCELERATOR_RESOURCE = "accelerator_type:"

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
# labels: what `ray start` needs to describe a node, and what `ray.nodes()` tells back


def node_labels(devices: Sequence[Device], node: Node | None = None) -> dict[str, str]:
    """The labels that describe a node with these devices (and, given ``node``, its CUDA version and datacenter) to
    flashpoint's Ray backend.

    Raises:
        ConfigError: no devices and nothing else to say, or devices of more than one model (a Ray label names one
            model per node).
    """
    extra: dict[str, str] = {}
    if node is not None:
        if node.cuda and devices:  # CUDA matters to GPU endpoints only
            extra[CUDA_LABEL] = node.cuda
        if node.datacenter:
            extra[DATACENTER_LABEL] = node.datacenter
    if not devices:
        if extra:
            return extra
        raise ConfigError(
            "this node has no GPUs to label (no NVIDIA driver, and FLASHPOINT_SIMULATED_GPUS is not set); "
            "start it without GPU flags, or simulate some with FLASHPOINT_SIMULATED_GPUS=NVIDIA_H200:1"
        )
    names = sorted({d.name for d in devices})
    if len(names) > 1:
        raise ConfigError(
            f"this node has GPUs of {len(names)} models ({', '.join(names)}), and a Ray node carries one gpu-model "
            "label: start one Ray node per model, each with CUDA_VISIBLE_DEVICES set to that model's devices"
        )
    labels = {GPU_MODEL_LABEL: gpu_model_label(names[0])}
    if any(d.simulated for d in devices):
        labels[SIMULATED_LABEL] = "1"
    return {**labels, **extra}


def start_flags(devices: Sequence[Device], node: Node | None = None, *, declared: bool = False) -> list[str]:
    """The ``ray start`` flags for a node with these devices, e.g. ``--num-gpus=2 --labels=gpu-model=NVIDIA-H200``;
    with ``node``, its CUDA version and datacenter labels too, and (``declared``: FLASHPOINT_CPUS or
    FLASHPOINT_MEMORY_GB set) its logical CPUs and memory, so Ray's accounting is flashpoint's."""
    labels = node_labels(devices, node)
    flags = [f"--num-gpus={len(devices)}"]
    if node is not None and declared:
        flags += [f"--num-cpus={node.cpus}", f"--memory={node.memory_mb * _MIB}"]
    return [*flags, "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items())]


def node_name(node: Mapping[str, Any]) -> str:
    """How placements name a Ray node: its address and the start of its node id, e.g. ``10.0.0.5/67f885db``."""
    return f"{node.get('NodeName') or node.get('NodeManagerAddress') or 'ray'}/{str(node['NodeID'])[:8]}"


def _coarse_type(node: Mapping[str, Any]) -> str | None:
    labels = node.get("Labels") or {}
    if labels.get(_ACCELERATOR_LABEL):
        return str(labels[_ACCELERATOR_LABEL])
    for resource in node.get("Resources") or {}:
        if str(resource).startswith(_ACCELERATOR_RESOURCE):
            return str(resource)[len(_ACCELERATOR_RESOURCE) :]
    return None


def devices_from_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[Device]:
    """The GPUs of the live nodes among ``nodes`` (as ``ray.nodes()`` gives them), in the order given.

    A node's ``GPU`` resource says how many devices it has; its ``gpu-model`` label says which model. A node without
    that label falls back to Ray's coarse accelerator type: the device is marked ``coarse``, and gets a catalog model
    only when the coarse name identifies one ("H200"); an ambiguous one ("A100") stays unrecognised, for ``ANY`` only.
    """
    devices: list[Device] = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        count = int((node.get("Resources") or {}).get("GPU", 0))
        if count < 1:
            continue
        labels = node.get("Labels") or {}
        label = labels.get(GPU_MODEL_LABEL)
        if label:
            model = identify_label(str(label))
            name, coarse = (model.name if model is not None else str(label)), False
        else:
            name = _coarse_type(node) or "unlabelled GPU"
            model, coarse = identify(name), True
        simulated = str(labels.get(SIMULATED_LABEL, "")).lower() in ("1", "true", "yes")
        where = node_name(node)
        for index in range(count):
            devices.append(
                Device(
                    node=where,
                    index=index,
                    name=name,
                    model=model,
                    memory_mb=model.vram_gb * 1024 if model is not None else 0,
                    simulated=simulated,
                    uuid=f"{node['NodeID']}:{index}",
                    coarse=coarse,
                )
            )
    return devices


def nodes_from_ray(nodes: Sequence[Mapping[str, Any]]) -> list[Node]:
    """The live nodes among ``nodes`` (as ``ray.nodes()`` gives them), with or without GPUs, in the order given: their
    ``CPU`` and ``memory`` resources (what CPU workers may reserve), their ``cuda-version`` label (None without one:
    GPU endpoints with ``min_cuda_version`` pass such a node by), and their other labels (``datacenter`` among them;
    Ray's own ``ray.io/`` labels and flashpoint's are left out)."""
    found: list[Node] = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        resources = node.get("Resources") or {}
        labels = {str(k): str(v) for k, v in (node.get("Labels") or {}).items()}
        found.append(
            Node(
                node_name(node),
                cpus=int(resources.get("CPU", 0)),
                memory_mb=int(resources.get("memory", 0)) // _MIB,
                cuda=labels.get(CUDA_LABEL) or None,
                labels={k: v for k, v in labels.items() if not k.startswith("ray.io/") and k not in _OWN_LABELS},
                simulated=labels.get(SIMULATED_LABEL, "").lower() in ("1", "true", "yes"),
            )
        )
    return found


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

    async def start(
        self, argv: list[str], env: dict[str, str], cwd: str | None, plane_python: str, http: bool = False
    ) -> tuple[list[str], str | None]:
        """Start the worker process; the GPU ids Ray gave this actor (and so the worker), and a route worker's
        address: a free port on this node's address, which the control plane's proxy connects to."""
        import ray

        command = list(argv)
        if command and command[0] == plane_python:  # the plane's interpreter means this node's (same packages)
            command[0] = sys.executable
        node_id = ray.get_runtime_context().get_node_id()
        # Ray set CUDA_VISIBLE_DEVICES for this actor to the GPUs it gave it, numbered as the node's raylet sees them
        # (which honours a CUDA_VISIBLE_DEVICES the node was started with): the worker keeps those, not the ledger's
        plane_env = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
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
        wrapped = [sys.executable, "-m", "flashpoint.worker.launch", "--parent", str(os.getpid()), "--", *command]
        self._proc = await process.spawn(wrapped, full_env, cwd)
        self._task = asyncio.create_task(self._run(self._proc))
        return [str(i) for i in ray.get_gpu_ids()], where

    async def _run(self, proc: asyncio.subprocess.Process) -> None:
        self._code = await process.watch(proc, self._add)
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

    def __init__(
        self,
        address: str | None,
        *,
        ready_timeout_s: float = 60.0,
        poll_s: float = 1.0,
        local_devices: Sequence[Device] = (),
        local_node: Node | None = None,
    ) -> None:
        """``address`` is a Ray cluster's (``ray://``, ``host:port`` or ``auto``); None starts a one-node Ray here,
        labelled from ``local_devices`` (this machine's NVML or simulated GPUs) and ``local_node`` (its CUDA version
        and datacenter; its logical CPUs become the node's)."""
        self.address = address
        self.ready_timeout_s = ready_timeout_s
        self.poll_s = poll_s
        self._local = list(local_devices)
        self._local_node = local_node
        self._devices: list[Device] = []
        self._fleet_nodes: list[Node] = []
        self._nodes: dict[str, Mapping[str, Any]] = {}  # node name -> ray.nodes() entry
        self._first_seen: dict[str, int] = {}
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
                _check_reachable(self.address)
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
                    # "local": a new instance of our own, even where `ray start` left a cluster running on this machine
                    ray.init(address="local", num_gpus=len(self._local), labels=labels, **options)
            except ConfigError:
                raise
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
        """Take a ``ray.nodes()`` answer; True when the devices changed. Nodes keep the order they first joined in."""
        for node in nodes:
            self._first_seen.setdefault(str(node["NodeID"]), len(self._first_seen))
        live = sorted((n for n in nodes if n.get("Alive")), key=lambda n: self._first_seen[str(n["NodeID"])])
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
        self._poller = asyncio.get_running_loop().create_task(self._poll(on_change))

    async def _poll(self, on_change: FleetCallback) -> None:
        import ray

        while True:
            await asyncio.sleep(self.poll_s)
            try:
                nodes = await asyncio.to_thread(ray.nodes)
            except Exception as exc:  # the GCS may be restarting: keep the last fleet and ask again
                log.warning("cannot read the Ray cluster's nodes: %s", exc)
                continue
            if self._read_fleet(nodes):
                on_change(Fleet.of(self._devices, self._fleet_nodes))

    # -- workers

    def _selector(self, where: str, gpus: bool) -> dict[str, str]:
        node = self._nodes.get(where)
        if node is None:
            raise NotReadyError(f"node {where} has left the Ray cluster")
        selector = {_NODE_ID_LABEL: str(node["NodeID"])}
        label = (node.get("Labels") or {}).get(GPU_MODEL_LABEL)
        if label and gpus:
            selector[GPU_MODEL_LABEL] = str(label)
        return selector

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        import ray

        if self._closed or not ray.is_initialized():  # Ray calls would start (or join) a Ray of their own
            raise BackendError(f"worker {launch.worker_id}: the Ray backend is closed")
        # a CPU worker reserves its instance's CPUs and memory in Ray too, so Ray's accounting is the ledger's
        options: dict[str, Any] = {"num_cpus": launch.cpus, "num_gpus": len(launch.devices), "max_restarts": 0}
        if launch.memory_mb:
            options["memory"] = launch.memory_mb * _MIB
        where = launch.devices[0].node if launch.devices else launch.node
        if where:
            options["label_selector"] = self._selector(where, bool(launch.devices))
        if self._host_class is None:
            self._host_class = ray.remote(WorkerHost)
        actor = self._host_class.options(**options).remote()
        self._starting.add(actor)
        self._none_starting.clear()
        try:
            gpu_ids, where_http = await asyncio.wait_for(
                actor.start.remote(list(launch.argv), dict(launch.env), launch.cwd, sys.executable, launch.http),
                self.ready_timeout_s,
            )
        except asyncio.TimeoutError:
            _kill(actor)
            where = where or "any node"
            raise NotReadyError(
                f"worker {launch.worker_id}: Ray did not start its actor on {where} within {self.ready_timeout_s:g}s "
                "(the node may be gone, or its GPUs in use outside flashpoint)"
            ) from None
        except ray.exceptions.ActorUnschedulableError as exc:  # the node left, or cannot hold the request any more
            _kill(actor)
            raise NotReadyError(f"worker {launch.worker_id}: Ray cannot place it there: {_short(exc)}") from exc
        except Exception as exc:  # the actor died in its constructor, the command could not start, or close() came
            _kill(actor)
            raise BackendError(f"worker {launch.worker_id}: {_short(exc)}") from exc
        finally:
            self._starting.discard(actor)
            if not self._starting:
                self._none_starting.set()
        if self._closed:
            _kill(actor)
            raise BackendError(f"worker {launch.worker_id}: the Ray backend is closed")
        self._actors[launch.worker_id] = actor
        self._pumps[launch.worker_id] = asyncio.create_task(self._pump(launch.worker_id, actor, on_line, on_exit))
        ids = tuple(int(i) for i in gpu_ids) if all(i.isdigit() for i in gpu_ids) else None
        return Started(device_ids=ids, address=where_http)

    async def _pump(self, worker_id: str, actor: Any, on_line: LineCallback, on_exit: ExitCallback) -> None:
        code = -1
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
            on_line(worker_id, "stderr", f"flashpoint: the Ray actor of worker {worker_id} is gone: {_short(exc)}")
        finally:
            self._actors.pop(worker_id, None)
            self._pumps.pop(worker_id, None)
            _kill(actor)
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


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast, and say what to do, when nothing listens at a cluster address (Ray itself retries for minutes)."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"Ray address {address!r} is not HOST:PORT; give the head node's address as `ray start --head` printed it, "
            "e.g. 10.0.0.5:6379, or 'auto' on a node of the cluster"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BackendError(
            f"no Ray cluster answers at {address} ({exc}). Start one with `ray start --head` and pass the address it "
            "prints as FLASHPOINT_RAY_ADDRESS (or serve --ray-address); leave it unset to start Ray on this machine"
        ) from None


def _kill(actor: Any) -> None:
    """End an actor, unless Ray is already shut down (``ray.kill`` would start a Ray of its own to do it)."""
    import ray

    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.kill(actor)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
