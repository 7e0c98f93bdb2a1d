"""Network volumes with real workers: a named directory on the host, created on first use, that every worker of an
endpoint sees through ``FLASHPOINT_VOLUME_PATH``, and at Flash's ``/runpod-volume`` where the worker can mount it
(root on Linux: a mount namespace of the worker's own)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuGroup, NetworkVolume
from flashpoint.fleet import volumes

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


async def test_workers_share_a_volume_and_each_endpoint_sees_its_own(
    make_embedded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "volumes"
    monkeypatch.setenv("FLASHPOINT_VOLUMES_DIR", str(root))
    make_embedded("NVIDIA_H200:2")

    @Endpoint(name="vol-writer", gpu=GpuGroup.ANY, volume=NetworkVolume(name="models"))
    def write(text: str) -> dict:
        path = os.environ["FLASHPOINT_VOLUME_PATH"]
        with open(os.path.join(path, "weights.txt"), "w") as f:
            f.write(text)
        return {"path": path, "pid": os.getpid()}

    @Endpoint(name="vol-reader", gpu=GpuGroup.ANY, volume=NetworkVolume(name="models"))
    def read() -> dict:
        path = os.environ["FLASHPOINT_VOLUME_PATH"]
        with open(os.path.join(path, "weights.txt")) as f:
            return {"path": path, "text": f.read(), "pid": os.getpid()}

    @Endpoint(name="vol-other", gpu=GpuGroup.ANY, volume=NetworkVolume(name="scratch"))
    def listing() -> dict:
        path = os.environ["FLASHPOINT_VOLUME_PATH"]
        return {"path": path, "files": sorted(os.listdir(path))}

    assert not (root / "models").exists()
    wrote = await write("hello")
    got = await read()
    other = await listing()

    assert (root / "models" / "weights.txt").read_text() == "hello"  # on the host, where the root says
    assert got["text"] == "hello" and got["pid"] != wrote["pid"]  # another worker process read it back
    assert (root / "scratch").is_dir() and other["files"] == []  # another volume: its own directory
    expected = volumes.RUNPOD_VOLUME if volumes.can_mount() else None
    for answer, name in ((wrote, "models"), (got, "models"), (other, "scratch")):
        assert answer["path"] == (expected or str(root / name))
    if expected:
        # each worker sees its own endpoint's volume at /runpod-volume; this process (the host) does not
        assert not os.path.exists(os.path.join(volumes.RUNPOD_VOLUME, "weights.txt"))
