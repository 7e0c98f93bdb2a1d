"""The fleet: discovering the GPUs of a node through NVML, or the simulated ones ``fleetspec`` describes; and this
machine's node facts (logical CPUs, memory, the driver's CUDA version, a datacenter label)."""

from __future__ import annotations

import logging
import os

from flashpoint.config import Settings
from flashpoint.fleet.inventory import DATACENTER_LABEL, Device, Fleet, Node
from flashpoint.fleet.simulated import parse_simulated, read_fleet
from flashpoint.gpus import identify

__all__ = [
    "discover",
    "discover_fleet",
    "host_node",
    "machine_cores",
    "machine_memory_mb",
    "nvml_cuda_version",
    "nvml_devices",
    "parse_simulated",
]

logger = logging.getLogger("flashpoint.fleet")


def _text(value: object) -> str:
    # nvidia-ml-py returns str in recent releases and bytes in older ones.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def nvml_devices(*, node: str = "local") -> list[Device]:
    """The real GPUs of this machine, as NVML reports them, in NVML index order.

    Indices are NVML's, which is the PCI bus order; CUDA uses the same order when
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (or address devices by ``uuid``). A device the catalog does not know
    is still returned, with ``model=None``.

    Returns:
        The devices, or ``[]`` when there is no NVIDIA driver, no ``pynvml`` or NVML fails (logged at DEBUG).
    """
    try:
        import pynvml
    except ImportError as exc:
        logger.debug("no GPUs from NVML: pynvml is not installed (%s)", exc)
        return []
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        logger.debug("no GPUs from NVML: nvmlInit failed (%s)", exc)
        return []
    devices: list[Device] = []
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                name = _text(pynvml.nvmlDeviceGetName(handle)).strip()
                memory_mb = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
                uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            except (pynvml.NVMLError, OSError) as exc:
                # One broken device (e.g. "GPU is lost") must not hide the healthy ones.
                logger.warning("skipping GPU %d on %s: NVML failed to read it (%s)", index, node, exc)
                continue
            devices.append(
                Device(
                    node=node,
                    index=index,
                    name=name,
                    model=identify(name, memory_mb),
                    memory_mb=memory_mb,
                    simulated=False,
                    uuid=uuid,
                )
            )
    except (pynvml.NVMLError, OSError) as exc:
        logger.debug("no GPUs from NVML: %s", exc)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except (pynvml.NVMLError, OSError) as exc:
            logger.debug("nvmlShutdown failed (%s)", exc)
    return devices


def discover(simulated: str | None = None, *, node: str = "local") -> list[Device]:
    """The devices of the fleet: the simulated ones when ``simulated`` declares any, else this node's NVML ones.

    Args:
        simulated: the value of ``FLASHPOINT_SIMULATED_GPUS``: ``MODEL:COUNT,...`` (devices of this node),
            ``NODE=MODEL:COUNT,...;...`` (several nodes), or a fleet file (``@path`` or ``*.toml``); see
            ``flashpoint.fleet.simulated``. None or blank means real devices.
        node: this node's name: the real devices' node, and the simulated ones' in the single-node form.

    Raises:
        ConfigError: ``simulated`` is set but describes no usable fleet (the message says what to write).
    """
    if simulated is not None and simulated.strip():
        return list(read_fleet(simulated, node=node).devices)
    return nvml_devices(node=node)


def nvml_cuda_version() -> str | None:
    """The CUDA version this machine's NVIDIA driver supports, e.g. "12.8"; None without a driver or ``pynvml``."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        logger.debug("no CUDA version from NVML: nvmlInit failed (%s)", exc)
        return None
    try:
        version = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
    except (pynvml.NVMLError, OSError, AttributeError) as exc:
        logger.debug("no CUDA version from NVML (%s)", exc)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except (pynvml.NVMLError, OSError) as exc:
            logger.debug("nvmlShutdown failed (%s)", exc)
    return cuda_text(version)


def cuda_text(version: int) -> str:
    """NVML's integer CUDA version as text: 12080 -> "12.8", 11040 -> "11.4"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def machine_cores() -> tuple[int, ...]:
    """The ids of the CPUs this process may run on (its affinity where the OS has one), in order."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this OS (macOS)
        return tuple(range(os.cpu_count() or 1))


def machine_memory_mb() -> int:
    """This machine's physical memory in MiB (0 when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // (1024 * 1024)
    except (AttributeError, OSError, ValueError):
        return 0


def host_node(settings: Settings, *, cuda: str | None, simulated: bool = False) -> Node:
    """This machine as a node: its logical CPUs and memory (or FLASHPOINT_CPUS and FLASHPOINT_MEMORY_GB), ``cuda``,
    and FLASHPOINT_DATACENTER as its ``datacenter`` label.

    Its core ids are the CPUs it may run on; FLASHPOINT_CPUS=N takes the first N of them, and past those declares
    ids this machine does not have (a worker given one is not pinned to it: there is nothing to pin to).
    """
    cores = machine_cores()
    if settings.cpus is not None:
        extra = range(max(cores, default=-1) + 1, max(cores, default=-1) + 1 + max(settings.cpus - len(cores), 0))
        cores = (cores + tuple(extra))[: settings.cpus]
    memory_mb = round(settings.memory_gb * 1024) if settings.memory_gb is not None else machine_memory_mb()
    labels = {DATACENTER_LABEL: settings.datacenter} if settings.datacenter else {}
    return Node(
        settings.node,
        cpus=len(cores),
        memory_mb=memory_mb,
        cuda=cuda,
        labels=labels,
        cores=cores,
        simulated=simulated,
    )


def discover_fleet(settings: Settings, simulated: str | None = None) -> Fleet:
    """This machine's fleet: the simulated one ``simulated`` (FLASHPOINT_SIMULATED_GPUS) describes, its nodes taking
    what they do not declare from this machine (and the simulated CUDA version); else this machine as one node with
    its NVML GPUs (none is fine: a CPU-only machine runs CPU endpoints) and its driver's CUDA version.

    Raises:
        ConfigError: ``simulated`` describes no usable fleet.
    """
    if simulated is not None and simulated.strip():
        host = host_node(settings, cuda=settings.simulated_cuda, simulated=True)
        return read_fleet(simulated, node=settings.node, host=host).fleet
    devices = nvml_devices(node=settings.node)
    return Fleet.of(devices, [host_node(settings, cuda=nvml_cuda_version())])
