"""GPU telemetry read from NVML: one sample of every real device of this node and of the processes using them.

``NvmlReader.read(devices)`` is blocking (NVML calls go to the driver): the plane runs it in a worker thread
(``asyncio.to_thread``, ``scheduler/gpusampler.py``), never on its loop. It reads each device by its UUID:
utilisation (%), memory used and total (MiB), temperature (degrees C) and power draw (W), and the compute processes
NVML lists on it with the memory each uses. A figure the device does not report (power on some boards, a process's
memory inside a container) is None; a failing or absent NVML gives a sample with ``failure`` set and no readings, and
is logged as a warning once per reader (then at DEBUG), so the fleet shows "unknown" rather than numbers.

Simulated devices are never read: they have no telemetry, and nothing here invents any.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flashpoint.fleet.inventory import Device

__all__ = ["SIMULATED", "DeviceReading", "NvmlReader", "ProcessReading", "Reader", "Sample", "sampled_devices"]

logger = logging.getLogger("flashpoint.fleet")

#: what a simulated device shows where a real one shows its telemetry
SIMULATED = "simulated: no telemetry"
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One device's figures in one sample; None where NVML did not give that figure."""

    uuid: str
    utilization_pct: float | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    temperature_c: float | None
    power_w: float | None


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """A compute process on one device, as NVML lists it."""

    #: the device's UUID
    uuid: str
    pid: int
    #: None when NVML cannot say (a process of another pid namespace, some drivers in containers)
    memory_used_mb: int | None
    #: the process's session id (a worker is started in its own session, so its children share its pid here); None
    #: when the process is not visible from here
    session: int | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of every real device asked for, and of the processes on them."""

    devices: tuple[DeviceReading, ...] = ()
    processes: tuple[ProcessReading, ...] = ()
    #: why NVML could not be read at all ("" when it was): the devices' telemetry is then unknown
    failure: str = ""


#: what the plane's sampler calls, in a worker thread, with the devices to read
Reader = Callable[[Sequence[Device]], Sample]


def sampled_devices(devices: Sequence[Device], node: str) -> list[Device]:
    """The devices an NVML reader on ``node`` can read: the real ones of that node that have a UUID."""
    return [d for d in devices if not d.simulated and d.node == node and d.uuid]


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None


class NvmlReader:
    """Reads samples through NVML (``pynvml`` from nvidia-ml-py), initialising it once and keeping it open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one thread at a time: the sampler never overlaps, but a CLI read may
        self._nvml: Any = None
        self._warned = False

    def _fail(self, why: str) -> Sample:
        if not self._warned:
            self._warned = True
            logger.warning("GPU telemetry unknown: %s (shown as unknown; this warning is not repeated)", why)
        else:
            logger.debug("GPU telemetry unknown: %s", why)
        return Sample(failure=why)

    def read(self, devices: Sequence[Device]) -> Sample:
        """One sample of ``devices`` (their UUIDs looked up in NVML); a device NVML cannot find or read is left
        out (its telemetry is unknown), and an NVML that fails as a whole gives ``Sample(failure=...)``."""
        try:
            import pynvml as nvml
        except ImportError as exc:
            return self._fail(f"pynvml is not installed ({exc})")
        # what pynvml raises: its NVMLError subclasses (NotSupported, GpuIsLost, NotFound, ...), OSError from ctypes,
        # and its library mismatch (a driver older than the bindings' unversioned calls)
        failures = (nvml.NVMLError, OSError, getattr(nvml, "NVMLLibraryMismatchError", OSError))
        with self._lock:
            if self._nvml is None:
                try:
                    nvml.nvmlInit()
                except failures as exc:  # no driver, no library
                    return self._fail(f"NVML could not start ({exc})")
                self._nvml = nvml
            readings: list[DeviceReading] = []
            processes: list[ProcessReading] = []
            errors: list[str] = []
            for device in devices:
                try:
                    handle = nvml.nvmlDeviceGetHandleByUUID(device.uuid)
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                except failures as exc:  # "GPU is lost", an unknown UUID: this device alone is unknown
                    errors.append(f"{device.node}:{device.index} ({exc})")
                    continue
                readings.append(_reading(nvml, failures, handle, device.uuid, memory))
                for proc in _processes(nvml, failures, handle):
                    used = getattr(proc, "usedGpuMemory", None)
                    pid = int(proc.pid)
                    processes.append(
                        ProcessReading(device.uuid, pid, int(used) // _MIB if used is not None else None, _session(pid))
                    )
            if errors and not readings:
                self._shutdown()  # started again at the next read: a driver reloaded since needs a new nvmlInit
                return self._fail("NVML could not read " + ", ".join(errors))
            if errors:
                logger.debug("GPU telemetry: NVML could not read %s", ", ".join(errors))
            return Sample(tuple(readings), tuple(processes))

    def __call__(self, devices: Sequence[Device]) -> Sample:
        return self.read(devices)

    def close(self) -> None:
        """Shut NVML down (a later ``read`` starts it again)."""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except (nvml.NVMLError, OSError) as exc:
                logger.debug("nvmlShutdown failed (%s)", exc)


def _reading(nvml: Any, failures: tuple[type[Exception], ...], handle: Any, uuid: str, memory: Any) -> DeviceReading:
    utilization = _figure(failures, nvml.nvmlDeviceGetUtilizationRates, handle)
    temperature = _figure(failures, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
    power_mw = _figure(failures, nvml.nvmlDeviceGetPowerUsage, handle)  # NVML reports milliwatts
    return DeviceReading(
        uuid=uuid,
        utilization_pct=float(utilization.gpu) if utilization is not None else None,
        memory_used_mb=int(memory.used) // _MIB,
        memory_total_mb=int(memory.total) // _MIB,
        temperature_c=float(temperature) if temperature is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
    )


def _processes(nvml: Any, failures: tuple[type[Exception], ...], handle: Any) -> list[Any]:
    """The compute processes on a device: the bindings' newest call, or the older one a driver that predates it has."""
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"):
        listed = _figure(failures, getattr(nvml, name, lambda handle: None), handle)
        if listed is not None:
            return list(listed)
    return []


def _figure(failures: tuple[type[Exception], ...], read: Callable[..., Any], *args: Any) -> Any:
    """One figure, or None where the device does not report it (NVMLError_NotSupported on some boards, a driver too
    old for a call): a figure nobody can read is unknown, not an error."""
    try:
        return read(*args)
    except failures:
        return None
