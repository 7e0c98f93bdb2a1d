"""A served app whose endpoints run unmodified Runpod handler files (tests/apps/handlers/) as their workers."""

from __future__ import annotations

from pathlib import Path

from flashpoint import Endpoint, GpuGroup, GpuType

HANDLERS = Path(__file__).resolve().parent / "handlers"


def handler(name: str, file: str, **options: object) -> object:
    return Endpoint(name=name, worker_command=["python", file], worker_cwd=HANDLERS, **options)


echo = handler("echo", "echo.py", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80])
errors = handler("errors", "errors.py", cpu="cpu3c-1-2")
progress = handler("progress", "progress.py", cpu="cpu3c-1-2")
stream = handler("stream", "stream.py", cpu="cpu3c-1-2")
stream_aggregate = handler("stream-aggregate", "stream.py", cpu="cpu3c-1-2", env={"AGGREGATE": "1"})
concurrent = handler("concurrent", "batched.py", gpu=GpuType.NVIDIA_H200, max_concurrency=3)
sleepy = handler("sleepy", "sleepy.py", cpu="cpu3c-1-2")
refresh = handler("refresh", "refresh.py", cpu="cpu3c-1-2")
crash = handler("crash", "crash_at_start.py", gpu=GpuType.NVIDIA_H200)
killed = handler("killed", "killed.py", gpu=GpuGroup.AMPERE_80, gpu_count=2)
