"""The fleet: discovering the GPUs of a node through NVML, or the simulated ones ``fleetspec`` describes."""

from __future__ import annotations

import logging

from flashpoint.fleetspec import parse_simulated, read_fleet
from flashpoint.gpus import identify
from flashpoint.scheduler.inventory import Device

__all__ = ["discover", "nvml_devices", "parse_simulated"]

logger = logging.getLogger(__name__)


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
            ``flashpoint.fleetspec``. None or blank means real devices.
        node: this node's name: the real devices' node, and the simulated ones' in the single-node form.

    Raises:
        ConfigError: ``simulated`` is set but describes no usable fleet (the message says what to write).
    """
    if simulated is not None and simulated.strip():
        return list(read_fleet(simulated, node=node).devices)
    return nvml_devices(node=node)
