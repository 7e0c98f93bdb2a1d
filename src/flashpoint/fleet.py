"""The fleet: discovering the GPUs of a node through NVML, or declaring simulated ones."""

from __future__ import annotations

import logging

from flashpoint.errors import ConfigError, UnknownGPUError
from flashpoint.gpus import GpuGroup, GPUModel, GpuType, identify, model_of, parse_gpu, pool_models
from flashpoint.scheduler.inventory import Device

__all__ = ["discover", "nvml_devices", "parse_simulated"]

logger = logging.getLogger(__name__)

_VARIABLE = "FLASHPOINT_SIMULATED_GPUS"
_FORMAT = "MODEL:COUNT[,MODEL:COUNT...], e.g. 'NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2,NVIDIA L40S:1'"


def _error(message: str) -> ConfigError:
    return ConfigError(f"{_VARIABLE}: {message}. Expected {_FORMAT}")


def _model(text: str, entry: str) -> GPUModel:
    try:
        parsed = parse_gpu(text)
    except UnknownGPUError as exc:
        # Both a miss ("H20") and an ambiguous name ("A100") land here; either way the suggestions say what to write.
        hint = f"; did you mean {' or '.join(repr(s) for s in exc.suggestions)}?" if exc.suggestions else ""
        raise _error(f"entry {entry!r}: {text!r} is not one GPU model{hint} (`flashpoint gpus` lists them)") from exc
    if isinstance(parsed, GPUModel):
        return parsed
    if parsed is GpuType.ANY or parsed is GpuGroup.ANY:
        raise _error(f"entry {entry!r}: 'any' is not a device; name a GPU model, e.g. 'NVIDIA_H200:1'")
    if isinstance(parsed, GpuGroup):
        first = pool_models(parsed)[0]
        example = first.member.name if first.member is not None else first.name
        raise _error(
            f"entry {entry!r}: {parsed.name} is a pool, and a simulated device is one model; "
            f"name a model, e.g. '{example}:1'"
        )
    return model_of(parsed)


def parse_simulated(spec: str, *, node: str = "local") -> list[Device]:
    """The simulated devices that ``FLASHPOINT_SIMULATED_GPUS`` declares.

    ``spec`` is comma-separated ``MODEL:COUNT``; MODEL is anything ``parse_gpu`` resolves to one model (a
    GpuType member name, an NVML name, a short name), COUNT a positive integer. Devices are numbered from 0
    in the order written and are labelled ``simulated=True``.

    Example:
        ``parse_simulated("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2")`` gives an H200 at index 0 and two
        A100 80GB PCIe at indices 1 and 2.

    Raises:
        ConfigError: an entry without a count, a count that is not a positive integer, a pool or ``any``
            instead of a model, or an unknown model (with close matches).
    """
    devices: list[Device] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue  # tolerate "A:1,,B:1" and a trailing comma
        model_text, colon, count_text = entry.rpartition(":")
        if not colon:
            raise _error(f"entry {entry!r} has no count")
        if not model_text.strip():
            raise _error(f"entry {entry!r} has no model")
        try:
            count = int(count_text.strip())
        except ValueError:
            raise _error(f"entry {entry!r}: count {count_text.strip()!r} is not an integer") from None
        if count < 1:
            raise _error(f"entry {entry!r}: count must be at least 1, got {count}")
        model = _model(model_text.strip(), entry)
        for _ in range(count):
            index = len(devices)
            devices.append(
                Device(
                    node=node,
                    index=index,
                    name=model.name,
                    model=model,
                    memory_mb=model.vram_gb * 1024,
                    simulated=True,
                    uuid=f"SIM-{node}-{index}",
                )
            )
    return devices


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
    """The devices of this node: the simulated ones when ``simulated`` declares any, else NVML's.

    Args:
        simulated: the value of ``FLASHPOINT_SIMULATED_GPUS``; None or blank means real devices.
        node: the node name the devices are recorded under.
    """
    if simulated is not None and simulated.strip():
        return parse_simulated(simulated, node=node)
    return nvml_devices(node=node)
