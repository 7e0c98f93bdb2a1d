"""The NVML reader (``fleet/telemetry.py``): on a machine where NVML finds a GPU, real figures of every device and the
processes using them; elsewhere those tests are skipped with the reason. A failing NVML (no driver here, or a device
NVML cannot find anywhere) gives a sample marked failed, with one warning however often it is read.

No stand-in NVML: these tests call the real pynvml against whatever driver this machine has."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from flashpoint.fleet.discovery import nvml_devices
from flashpoint.fleet.inventory import Device
from flashpoint.fleet.telemetry import NvmlReader, sampled_devices
from flashpoint.gpus import identify

pytestmark = pytest.mark.timeout(60)

H100 = "NVIDIA H100 80GB HBM3"
#: a UUID no GPU has: NVML cannot find it, on a machine with GPUs or without
NOWHERE = Device("local", 0, H100, identify(H100, 81559), 81559, False, "GPU-00000000-0000-0000-0000-000000000000")


def real_gpus() -> list[Device]:
    devices = nvml_devices()
    if not devices:
        pytest.skip("no NVIDIA GPU: NVML found none")
    return devices


@pytest.mark.parametrize(
    ("devices", "node", "read"),
    [
        ([NOWHERE], "local", [NOWHERE]),
        ([NOWHERE], "node-b", []),  # another node's device: its own node's plane reads it
        ([Device("local", 0, H100, None, 81559, True, "SIM-local-0")], "local", []),  # simulated: never read
        ([Device("local", 0, H100, None, 81559, False, "")], "local", []),  # no UUID to look it up by
    ],
)
def test_only_real_devices_of_the_node_with_a_uuid_are_read(
    devices: list[Device], node: str, read: list[Device]
) -> None:
    assert sampled_devices(devices, node) == read


def test_nvml_that_cannot_read_gives_a_failed_sample_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    reader = NvmlReader()
    caplog.set_level(logging.DEBUG, logger="flashpoint.fleet")
    try:
        first, second = reader.read([NOWHERE]), reader.read([NOWHERE])
    finally:
        reader.close()

    for sample in (first, second):
        assert sample.failure  # no driver ("could not start"), or no such device ("could not read")
        assert sample.devices == () and sample.processes == ()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "GPU telemetry unknown" in warnings[0].getMessage()


def test_every_real_gpu_reads_with_figures_nvml_vouches_for() -> None:
    devices = real_gpus()
    reader = NvmlReader()
    try:
        sample = reader.read(devices)
    finally:
        reader.close()

    assert sample.failure == ""
    assert [r.uuid for r in sample.devices] == [d.uuid for d in devices]
    for device, reading in zip(devices, sample.devices, strict=True):
        assert reading.memory_total_mb == device.memory_mb  # what discovery read, in the same MiB
        assert reading.memory_used_mb is not None and 0 <= reading.memory_used_mb <= device.memory_mb
        assert reading.utilization_pct is not None and 0 <= reading.utilization_pct <= 100
        if reading.temperature_c is not None:
            assert 0 < reading.temperature_c < 120
        if reading.power_w is not None:
            assert 0 < reading.power_w < 2000  # watts, not NVML's milliwatts


#: a process that makes a CUDA context on device 0 and allocates 256 MiB there (the driver API through ctypes: no
#: framework needed), says so, and holds it until its stdin closes
_HOLDER = textwrap.dedent(
    """
    import ctypes, sys
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(256 << 20)) == 0
    print("ready", flush=True)
    sys.stdin.read()
    """
)


def test_a_process_using_a_gpu_is_seen_with_its_memory() -> None:
    devices = real_gpus()
    first = min(devices, key=lambda d: d.index)
    reader = NvmlReader()
    before = reader.read([first])
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": first.uuid},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        during = reader.read([first])
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        reader.close()

    assert before.failure == "" and during.failure == ""
    (was,), (now,) = before.devices, during.devices
    assert now.memory_used_mb is not None and was.memory_used_mb is not None
    assert now.memory_used_mb - was.memory_used_mb >= 256  # its allocation, on the device it was pinned to
    mine = [p for p in during.processes if p.pid == holder.pid]
    # NVML lists processes by the host's pids: in a container of its own pid namespace the holder is not found by its
    # pid, which is why attribution falls back to the devices' memory (scheduler/gpustats.py)
    if mine:
        (proc,) = mine
        assert proc.uuid == first.uuid
        assert proc.session == holder.pid  # started in its own session, as workers are
        assert proc.memory_used_mb is None or proc.memory_used_mb >= 256
